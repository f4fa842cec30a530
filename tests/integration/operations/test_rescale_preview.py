"""The rescale form's preview: the DAG's own plan, the change named, nothing written, no lock taken.

Real Delta tables (an embedded-log input and the control plane); no Spark (planning reads metadata only)
and no Airflow (the logic under the form's routes is plain Python; ``tests/e2e/test_ui_forms.py`` asks the routes
of a running Airflow).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pipelines_airflow import rescale
from pipelines_airflow.page import render

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock
from pipelines.core.hashing import MAX_FACTOR, MAX_FACTOR_ENV
from pipelines.core.limits import MAX_REASON
from pipelines.demo.producer import produce
from pipelines.errors import ConfigError, PipelinesError, UnknownJobError
from pipelines.jobs.config import JobConfig
from pipelines.operations import scaling
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

REPO = Path(__file__).resolve().parents[3]
JOB = "preview_job"
MODEL = {
    "version": 1,
    "latest_version": 1,
    "factor": 1,
    "grouper": "GroupByPartition",
    "virtual_tasks": 2,
    "containers": 1,
    "inputs": [],
    "tasks": [],
}


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
    result = rescale.preview(job_home, JOB, "4", "more keys in flight")

    request = scaling.ScalingRequest(JOB, 4, "more keys in flight")
    assert result["plan"] == scaling.plan(job_home, request)  # exactly what elastic_rescale's plan task returns
    assert result["current"]["factor"] == 1 and result["current"]["virtual_tasks"] == 2
    plan = result["plan"]
    assert (plan["from_factor"], plan["to_factor"], plan["virtual_tasks"], plan["changes"]) == (1, 4, 8, True)
    assert (plan["from_version"], plan["to_version"]) == (1, 2)
    assert result["tasks_added"]["count"] == 8 and result["tasks_retired"]["count"] == 2
    assert all(name.endswith("-4") for name in result["tasks_added"]["names"])  # Partition p-bucket-factor
    change = result["change"]
    assert (change["kind"], change["replay"]) == ("split", 0)
    assert change["lines"][0].startswith("a split: each key bucket of factor 1 splits into 4 of factor 4")
    assert result["switch"]["mode"] == "catch-up" and "no driver is running" in result["switch"]["line"]
    assert result["conf"] == {"job": JOB, "factor": 4, "reason": "more keys in flight", "dry_run": False}
    assert result["lock"] is None
    assert _control_state(job_home) == before  # no model, checkpoint, event or lock row was written


def test_the_preview_does_not_wait_for_a_held_lock_and_says_it_is_held(job_home: Home) -> None:
    ScalingLock(job_home).acquire(JOB, "airflow:elastic_rescale:someone-else", "rescale to 2")
    before = _control_state(job_home)
    result = rescale.preview(job_home, JOB, 2)
    assert result["plan"]["to_factor"] == 2
    assert "someone-else" in result["lock"]
    assert _control_state(job_home) == before  # the other operation still holds its lock, untouched


def preview_page(result: Any, factor: str, error: str | None = None, dag: dict[str, Any] | None = None) -> str:
    from pipelines_airflow.page import plain

    context = {"job": JOB, "factor": factor, "reason": rescale.DEFAULT_REASON, "dag": dag or {}}
    return render("preview.html", result=plain(result), error=error, dag_id=rescale.RESCALE_DAG, **context)


def test_the_same_factor_previews_as_nothing_planned(job_home: Home) -> None:
    result = rescale.preview(job_home, JOB, 1)
    assert result["plan"]["changes"] is False and result["change"]["kind"] == "none"
    assert result["change"]["lines"] == [
        "nothing: factor 1 is the factor in force; no model would be planned and no run is needed"
    ]
    assert result["switch"]["mode"] is None
    html = preview_page(result, "1")
    assert 'class="confirm"' not in html  # no trigger button for a run that would do nothing
    assert "nothing planned" in html and 'class="planned"' not in html and "v2" not in html


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
        rescale.preview(job_home, job, factor)
    assert isinstance(raised.value, PipelinesError)  # the routes answer these with 400 and this text


BAD_REASONS = [
    pytest.param("a\x00b", "reason holds a NUL (U+0000) at character 2", id="nul"),
    pytest.param("more\nkeys", "reason holds a newline (U+000A) at character 5", id="newline"),
    pytest.param("\x1b[2J", "reason holds a control character (U+001B) at character 1", id="escape"),
    pytest.param("x" * 200_000, "reason has 200,000 characters: at most 500", id="200k"),
]


@pytest.mark.parametrize(("reason", "message"), BAD_REASONS)
def test_a_reason_no_history_can_show_is_refused_by_the_form_and_the_dags_own_check(
    job_home: Home, reason: str, message: str
) -> None:
    """The form's logic and ``scaling.plan`` (the CLI's and the DAG's path) refuse it alike, before any planning,
    in one short line that does not quote it; it used to be stored with the new model and in the run's conf."""
    before = _control_state(job_home)
    for refuse in (
        lambda: rescale.preview(job_home, JOB, "2", reason),
        lambda: rescale.rescale_request(job_home, JOB, "2", reason),
        lambda: scaling.plan(job_home, scaling.ScalingRequest(JOB, 2, reason)),
    ):
        with pytest.raises(ConfigError) as raised:
            refuse()
        assert str(raised.value).startswith(message) and len(str(raised.value)) < 300
    assert _control_state(job_home) == before


def test_the_allowed_range_follows_pipelines_max_factor(job_home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_FACTOR_ENV, "8")
    with pytest.raises(ConfigError, match=f"above the maximum 8: .* set {MAX_FACTOR_ENV}"):
        rescale.preview(job_home, JOB, 16)
    assert rescale.preview(job_home, JOB, 8)["max_factor"] == 8
    from pipelines_airflow.app import render_page

    page = render_page({"home": str(job_home.root), "generated_at": "t", "jobs": [{"job": JOB, "model": MODEL}]})
    assert 'type="number" name="factor" min="1" max="8" step="1"' in page
    assert 'current factor <b class="current-factor">1</b>' in page


def test_the_preview_page_offers_the_trigger_with_the_checked_conf(job_home: Home) -> None:
    result = rescale.preview(job_home, JOB, 4)
    html = preview_page(result, "4", dag={"paused": True})
    # posted in the same frame: Airflow's iframe sandbox allows forms, not navigating the Airflow window
    assert '<form class="confirm" method="post" action="../rescale">' in html and "_top" not in html.split("confirm")[1]
    assert 'name="factor" value="4"' in html and "elastic_rescale is paused" in html
    assert 'data-kind="split" data-switch="catch-up"' in html
    another = html.split("<h3>Another factor</h3>", 1)[1]  # the form to try another: current 1, field at 4
    assert '<b class="current-factor">1</b>' in another and 'step="1" required value="4"' in another
    assert f'name="reason" maxlength="{MAX_REASON}" required' in another  # the browser stops where the rule does
    refused = preview_page(None, "0", error="elasticity factor must be >= 1, got 0")
    assert 'class="refusal">elasticity factor must be &gt;= 1, got 0<' in refused and 'class="confirm"' not in refused


def test_a_post_from_another_site_is_not_the_same_origin() -> None:
    assert rescale.same_origin(None, "127.0.0.1:8080")  # no Origin: not a browser's cross-site form post
    assert rescale.same_origin("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not rescale.same_origin("https://evil.example", "127.0.0.1:8080")
    assert not rescale.same_origin("null", "127.0.0.1:8080")
    assert not rescale.same_origin("http://[::1", "127.0.0.1:8080")  # urlparse's ValueError was a 500


@pytest.fixture
def at_factor_4(job_home: Home) -> Home:
    """The job at factor 4 (v2), where key bucket 0 of partition 0 has read 20 records ahead of its siblings."""
    from pipelines import planning
    from pipelines.core.checkpoints import CheckpointMap
    from pipelines.core.ssp import SystemStreamPartition

    scaling.apply_plan(job_home, planning.plan_next(job_home, JOB, factor=4), "up to 4")
    offsets = {
        SystemStreamPartition("deltalog", "pv_events", p, b): ("20" if (p, b) == (0, 0) else "0")
        for p in range(2)
        for b in range(4)
    }
    ControlPlane(job_home).checkpoints.write(JOB, 2, CheckpointMap(4, offsets), 0)
    return job_home


@pytest.mark.parametrize(
    ("factor", "kind", "replay"),
    [
        (8, "split", 0),  # new buckets 0 and 4 inherit bucket 0's own position
        (2, "merge", 5),  # new bucket 0 starts at min(old 0, old 2): 20 records, 1 in lcm(4, 2) = 4 of them its keys
        (3, "replay", 5),  # every new bucket starts at the slowest of all 4: 3 x 20 records / lcm(4, 3) = 12
    ],
)
def test_the_preview_names_the_kind_of_change_and_the_records_it_expects_to_replay(
    at_factor_4: Home, factor: int, kind: str, replay: int
) -> None:
    change = rescale.preview(at_factor_4, JOB, factor)["change"]
    assert (change["kind"], change["replay"]) == (kind, replay)
    assert change["lines"][0].startswith({"split": "a split", "merge": "a merge", "replay": "neither a split"}[kind])
    if replay:
        assert f"about {replay:,} records" in change["lines"][0]


def test_a_running_driver_is_named_and_switches_in_place(job_home: Home) -> None:
    import time

    from pipelines.control.drivers import Registration

    driver = Registration(job_home, JOB, app_id="local-42", master="local[2]")
    driver.start()
    now = time.time()
    ControlPlane(job_home).metrics.append(
        [
            {"job": JOB, "model_version": 1, "batch_id": -1, "metric": name, "value": now}
            for name in ("query_started", "heartbeat")
        ]
    )
    switch = rescale.preview(job_home, JOB, 2)["switch"]
    assert switch["mode"] == "in-place" and f"(pid {driver.identity['pid']})" in switch["line"]
    assert "same Spark application" in switch["line"]
