"""The page that follows a triggered run (``templates/triggered.html``): tasks in order with what each took, the
scaling event's outcome at the end, and a refresh that does not keep saying "Run created"."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from pipelines_airflow.page import render

pytestmark = pytest.mark.unit

RUN_ID = "manual__2026-12-02T13:00:00+00:00"


def page(run: dict[str, Any], created: bool) -> str:
    return render("triggered.html", run=run, created=created, paused=False, run_url="../../dags/x/runs/y")


def run(state: str, result: dict[str, Any] | None, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    conf = {"job": "enrichment", "factor": 4}
    return {
        "dag_id": "elastic_rescale",
        "run_id": RUN_ID,
        "state": state,
        "note": None,
        "conf": conf,
        "finished": state in ("success", "failed"),
        "tasks": tasks,
        "result": result,
    }


def test_a_running_run_refreshes_to_itself_without_the_created_flag() -> None:
    html = page(run("running", None, [{"task": "validate", "state": "success", "duration_s": 2.25}]), created=True)
    [refresh] = re.findall(r'<meta http-equiv="refresh" content="([^"]+)">', html)
    assert refresh.startswith("5; url=?") and "created" not in refresh and "run_id=manual__2026-12-02T13" in refresh
    assert 'class="created"' in html  # the first load says it was created ...
    assert '<td class="took">2.2 s</td>' in html


def test_a_finished_run_shows_its_scaling_events_outcome_and_stops_refreshing() -> None:
    result = {
        "status": "verified",
        "from_factor": 1,
        "to_factor": 4,
        "to_version": 2,
        "downtime_s": 1.234,
        "records_replayed": 0,
        "mode": "in-place",
        "dq": "pass",
        "finished_at": datetime.now(UTC),
    }
    tasks = [
        {"task": "scale.begin", "state": "success", "duration_s": 3.0},
        {"task": "scale.record_event", "state": "success", "duration_s": None},
    ]
    html = page(run("success", result, tasks), created=False)
    assert "http-equiv" not in html
    assert re.search(r'class="run-result" data-status="verified">Scaling event: <span class="pill ok">verified', html)
    assert 'downtime <span class="downtime">1.2 s</span>' in html and "0 records replayed" in html
    assert "in-place" in html and "factor 1 → 4 (v2)" in html
    assert html.index("scale.begin") < html.index("scale.record_event")  # as given: the DAG's order
    assert '<td class="took">–</td>' in html
