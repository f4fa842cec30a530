"""What became of an autosize decision (``pipelines_airflow.autosize_runs``): the run it names, the page's words."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from pipelines_airflow.autosize_runs import outcome, run_id
from pipelines_airflow.page import render

pytestmark = pytest.mark.unit

AIRFLOW_RUN_ID = re.compile(r"^[A-Za-z0-9_.~:+-]+$")  # Airflow's [scheduler] allowed_run_id_pattern, by default


def test_a_decisions_run_id_is_one_airflow_accepts_and_two_decisions_get_two() -> None:
    at = datetime(2026, 12, 2, 3, 10, 0, 123456, tzinfo=UTC)
    assert run_id("enrich.v2-eu_1", at) == "autosize__enrich.v2-eu_1__2026-12-02T03:10:00.123456"
    assert AIRFLOW_RUN_ID.match(run_id("enrich.v2-eu_1", at))
    assert run_id("j", at) != run_id("j", at + timedelta(microseconds=1))
    naive = at.replace(tzinfo=None)  # as a Delta table may hand the timestamp back: the same instant, the same id
    assert run_id("j", naive) == run_id("j", at)


def test_the_outcome_reads_the_runs_state_and_note() -> None:
    assert outcome(None, None) == {"outcome": "not triggered", "why": None}
    assert outcome("success", None) == {"outcome": "applied", "why": None}
    skipped = "Skipped by scale.begin: the autosizer asked again says hold. Nothing was changed."
    assert outcome("success", skipped) == {"outcome": "skipped", "why": skipped}
    assert outcome("failed", "Failed at scale.migrate_checkpoints: X.") == {
        "outcome": "failed",
        "why": "Failed at scale.migrate_checkpoints: X.",
    }
    assert outcome("running", None) == {"outcome": "running", "why": None}


def test_the_page_shows_each_decisions_outcome_with_its_run() -> None:
    at = datetime(2026, 12, 2, 3, 10, tzinfo=UTC)
    rid = run_id("enrichment", at)
    decision = {
        "decided_at": at,
        "model_version": 2,
        "current_factor": 4,
        "action": "down",
        "target_factor": 2,
        "policy": "default",
        "reasons": ["tasks idle"],
        "observation": None,
        "run_id": rid,
        "run_url": f"../dags/elastic_rescale/runs/{rid}",
        "outcome": "skipped",
        "why": "Skipped by scale.begin: v3 is active now, and the autosizer asked again says hold.",
    }
    hold = {**decision, "action": "hold", "run_id": None, "run_url": None, "outcome": None, "why": None}
    page = render(
        "page.html", data={"jobs": [{"job": "enrichment", "errors": {}, "autosize_decisions": [decision, hold]}]}
    )
    body = page.split('class="decisions"')[1].split("<tbody>")[1].split("</tbody>")[0]
    rows = re.findall(r"<tr>.*?</tr>", body, flags=re.S)
    assert len(rows) == 2
    assert (
        'data-outcome="skipped"' in rows[0] and "v3 is active now, and the autosizer asked again says hold" in rows[0]
    )
    assert f'href="../dags/elastic_rescale/runs/{rid}"' in rows[0]
    assert 'class="outcome">–</td>' in rows[1]  # a hold triggers nothing
