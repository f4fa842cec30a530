"""The rescale form's preview: the DAG's own plan, the changes spelled out, nothing written, no lock taken.

Real Delta tables (an embedded-log input and the control plane); no Spark (planning reads metadata only)
and no Airflow (the logic under the form's routes is plain Python).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pipelines_airflow import forms

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.control.locks import ScalingLock
from pipelines.core.hashing import MAX_FACTOR, MAX_FACTOR_ENV
from pipelines.demo.producer import produce
from pipelines.errors import ConfigError, PipelinesError, UnknownJobError
from pipelines.jobs.config import JobConfig
from pipelines.operations import scaling
from pipelines.operations.jobs import create_job
from pipelines.systems.deltalog import DeltaLog

REPO = Path(__file__).resolve().parents[3]
JOB = "preview_job"


@pytest.fixture
def job_home(tmp_path: Path) -> Home:
    """A job created at factor 1 over a 2-partition stream, as `pipelines job create` makes it."""
    home = Home(tmp_path / "home")
    log = DeltaLog(home.streams)
    log.create("pv_events", 2)
    produce(log, home, "pv_events", 50, 5, seed=1)
    raw = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml").to_dict()
    raw.update(
        name=JOB,
        inputs=[{"system": "deltalog", "stream": "pv_events"}],
        sink={"table": f"{JOB}_out"},
        dead_letter={"table": f"{JOB}_dead"},
    )
    create_job(home, JobConfig.from_dict(raw))
    return home


def _control_state(home: Home) -> tuple[Any, ...]:
    control = ControlPlane(home)
    lock = ScalingLock(home).state(JOB)
    return (
        control.job_models.latest_version(JOB),
        control.job_models.active_version(JOB),
        len(control.job_models.history(JOB)),
        len(control.events.history(JOB)),
        None if lock is None else (lock.status, lock.owner, lock.at),
        sorted(p.name for p in home.control_table("checkpoints").local_path().rglob("*") if p.is_file()),
    )


def test_the_preview_is_the_dags_plan_with_its_changes_and_writes_nothing(job_home: Home) -> None:
    before = _control_state(job_home)
    result = forms.preview(job_home, JOB, "4", "more keys in flight")

    request = scaling.ScalingRequest(JOB, 4, "more keys in flight")
    assert result["plan"] == scaling.plan(job_home, request)  # exactly what elastic_rescale's plan task returns
    assert result["current"]["factor"] == 1 and result["current"]["virtual_tasks"] == 2
    plan = result["plan"]
    assert (plan["from_factor"], plan["to_factor"], plan["virtual_tasks"], plan["changes"]) == (1, 4, 8, True)
    assert (plan["from_version"], plan["to_version"]) == (1, 2)
    assert result["tasks_added"]["count"] == 8 and result["tasks_retired"]["count"] == 2
    assert all(name.endswith("-4") for name in result["tasks_added"]["names"])  # Partition p-bucket-factor
    assert result["changes"][0] == "elasticity factor 1 → 4"
    assert result["conf"] == {"job": JOB, "factor": 4, "reason": "more keys in flight", "dry_run": False}
    assert result["lock"] is None
    assert _control_state(job_home) == before  # no model, checkpoint, event or lock row was written


def test_the_preview_does_not_wait_for_a_held_lock_and_says_it_is_held(job_home: Home) -> None:
    ScalingLock(job_home).acquire(JOB, "airflow:elastic_rescale:someone-else", "rescale to 2")
    before = _control_state(job_home)
    result = forms.preview(job_home, JOB, 2)
    assert result["plan"]["to_factor"] == 2
    assert "someone-else" in result["lock"]
    assert _control_state(job_home) == before  # the other operation still holds its lock, untouched


def test_the_same_factor_previews_as_nothing_to_do(job_home: Home) -> None:
    result = forms.preview(job_home, JOB, 1)
    assert result["plan"]["changes"] is False and result["changes"][0].startswith("nothing:")
    html = forms.render_preview(JOB, "1", forms.DEFAULT_REASON, result, None, {"paused": False})
    assert "class='confirm'" not in html  # no trigger button for a run that would do nothing


@pytest.mark.parametrize(
    ("job", "factor", "error", "message"),
    [
        (JOB, "0", ConfigError, "must be >= 1"),
        (JOB, "-2", ConfigError, "whole number >= 1"),
        (JOB, "2.5", ConfigError, "whole number >= 1"),
        (JOB, "lots", ConfigError, "whole number >= 1, got 'lots'"),
        (JOB, "", ConfigError, f"give an elasticity factor: a whole number from 1 to {MAX_FACTOR}"),
        (JOB, str(MAX_FACTOR + 1), ConfigError, f"above the maximum {MAX_FACTOR}"),
        ("no_such_job", "2", UnknownJobError, "no_such_job"),
        ("", "2", ConfigError, "name the job"),
    ],
)
def test_bad_input_is_refused_with_the_reason(job_home: Home, job: str, factor: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as raised:
        forms.preview(job_home, job, factor)
    assert isinstance(raised.value, PipelinesError)  # the routes answer these with 400 and this text


def test_the_allowed_range_follows_pipelines_max_factor(job_home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_FACTOR_ENV, "8")
    with pytest.raises(ConfigError, match=f"above the maximum 8: .* set {MAX_FACTOR_ENV}"):
        forms.preview(job_home, JOB, 16)
    assert forms.preview(job_home, JOB, 8)["max_factor"] == 8
    form = forms.rescale_form({"job": JOB, "model": {"factor": 1}})
    assert "type='number' name='factor' min='1' max='8' step='1'" in form
    assert "current factor <b class='current-factor'>1</b>" in form


def test_the_preview_page_offers_the_trigger_with_the_checked_conf(job_home: Home) -> None:
    result = forms.preview(job_home, JOB, 4)
    html = forms.render_preview(JOB, "4", forms.DEFAULT_REASON, result, None, {"paused": True})
    assert "<form class='confirm' method='post' action='../rescale' target='_top'>" in html
    assert "name='factor' value='4'" in html and "elastic_rescale is paused" in html
    another = html.split("<h3>Another factor</h3>", 1)[1]  # the form to try another: current 1, field at 4
    assert "<b class='current-factor'>1</b>" in another and "step='1' required value='4'" in another
    refused = forms.render_preview(JOB, "0", forms.DEFAULT_REASON, None, "elasticity factor must be >= 1, got 0", {})
    assert "class='refusal'>elasticity factor must be &gt;= 1, got 0<" in refused and "class='confirm'" not in refused


def test_a_post_from_another_site_is_not_the_same_origin() -> None:
    assert forms.same_origin(None, "127.0.0.1:8080")  # no Origin: not a browser's cross-site form post
    assert forms.same_origin("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not forms.same_origin("https://evil.example", "127.0.0.1:8080")
    assert not forms.same_origin("null", "127.0.0.1:8080")
