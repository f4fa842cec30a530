"""Whether a job's driver runs, in the operator's words: running where and since when, or down and why."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pipelines.control.drivers import DriverRow
from pipelines.observe.drivers import driver_view
from pipelines.observe.render import html_section
from tests.unit.observe.test_render import observation

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def row(state: str = "running", age_s: float = 3.0, started_min: float = 30.0, **kw: object) -> DriverRow:
    values: dict[str, object] = {
        "job": "j",
        "driver_id": "d1",
        "host": "worker-7",
        "pid": 4242,
        "app_id": "local-1772366400000",
        "master": "local[4]",
        "started_at": NOW - timedelta(minutes=started_min),
        "state": state,
        "model_version": 3,
        "batch_id": 41,
        "detail": None,
        "at": NOW - timedelta(seconds=age_s),
        **kw,
    }
    return DriverRow(**values)  # type: ignore[arg-type]


def test_a_beating_driver_is_running_with_its_host_start_heartbeat_and_batch() -> None:
    view = driver_view([row()], "continuous", NOW)
    assert (view["running"], view["should_run"], view["down"]) == (True, True, False)
    assert view["summary"] == (
        "running on worker-7 (pid 4242) since 2026-03-01 11:30:00 UTC; last heartbeat 3 s ago, last batch 41 of v3"
    )
    assert view["detail"] == view["summary"].removeprefix("running ")  # the page's pill says "driver running"
    (shown,) = view["drivers"]
    assert shown["state"] == "running" and shown["app_id"] == "local-1772366400000" and shown["last_batch"] == 41


def test_a_continuous_job_whose_driver_went_silent_is_down_and_says_so() -> None:
    view = driver_view([row(age_s=7200.0)], "continuous", NOW)
    assert view["down"] and not view["running"]
    assert "went silent 2.0 h ago without stopping" in view["summary"] and "pid 4242 on worker-7" in view["summary"]
    assert view["drivers"][0]["state"] == "silent"


def test_a_stopped_or_failed_driver_is_named_with_how_it_ended() -> None:
    stopped = driver_view([row("stopped", age_s=600.0)], "continuous", NOW)
    assert stopped["down"] and "stopped cleanly at 2026-03-01 11:50:00 UTC after batch 41 of v3" in stopped["summary"]
    failed = driver_view([row("failed", detail="ConfigError: bad")], "continuous", NOW)
    assert failed["down"] and "failed at" in failed["summary"] and "ConfigError: bad" in failed["summary"]


def test_an_available_now_job_between_runs_is_not_down() -> None:
    view = driver_view([row("stopped", age_s=600.0)], "available-now", NOW)
    assert not view["down"] and not view["running"] and "elastic_microbatch" in view["summary"]
    assert driver_view([], "available-now", NOW)["summary"] == "never ran in this home"
    never = driver_view([], "continuous", NOW)
    assert never["down"] and never["summary"].endswith("a continuous job should have a driver")


def test_a_fresh_row_of_an_ended_driver_is_not_running() -> None:
    assert not driver_view([row("stopped", age_s=1.0)], "continuous", NOW)["running"]


def test_the_pages_driver_line_says_running_once() -> None:
    """The pill says "driver running"; the text beside it was the summary, which says it again."""
    obs = {**observation(), "driver": driver_view([row()], "continuous", NOW)}
    html = html_section(json.loads(json.dumps(obs, default=str)))
    line = html.split('class="driver-summary">', 1)[1].split("</span>", 1)[0]
    assert 'driver-state">driver running</span>' in html and line.startswith("on worker-7 (pid 4242)"), line
