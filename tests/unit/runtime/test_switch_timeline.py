"""A switch's phases: from the driver's times and Spark's report of the new query's first batch with data."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipelines.core.metric_names import SWITCH_PHASES
from pipelines.runtime.switch_timeline import SwitchTimeline

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 4, 2, 0, tzinfo=UTC).timestamp()


def _report(rows: int, at: float, **took: int) -> dict[str, object]:
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"numInputRows": rows, "timestamp": stamp, "durationMs": took}


def test_the_phases_come_from_the_drivers_times_and_the_first_batch_with_data() -> None:
    timeline = SwitchTimeline(stopped=T0, carried=T0 + 0.05, started=T0 + 0.15, resumed=T0 + 0.9)
    idle = _report(0, T0 + 0.3, latestOffset=40, walCommit=0, triggerExecution=45)
    first = _report(16, T0 + 0.5, latestOffset=300, walCommit=60, triggerExecution=700)
    phases = timeline.phases([idle, first])
    assert phases is not None and tuple(phases) == SWITCH_PHASES
    assert phases == pytest.approx(
        {
            "switch.started_ahead": 0.0,
            "switch.carry_s": 0.05,
            "switch.start_s": 0.10,
            "switch.first_trigger_s": 0.35,  # an idle trigger before it counts as the query's start-up
            "switch.plan_s": 0.30,
            "switch.offset_log_s": 0.06,
            "switch.first_batch_s": 0.70,
            "switch.downtime_s": 0.90,
        },
        abs=1e-3,
    )


def test_nothing_is_recorded_before_the_first_batch_with_data_is_reported() -> None:
    timeline = SwitchTimeline(stopped=T0, carried=T0 + 0.05, started=T0 + 0.15)
    assert timeline.phases([_report(16, T0 + 0.5)]) is None, "not resumed yet"
    timeline.resumed = T0 + 0.9
    assert timeline.phases([]) is None
    assert timeline.phases([_report(0, T0 + 0.3)]) is None, "only idle triggers so far"


def test_a_query_started_ahead_counts_neither_its_start_up_nor_its_wait_at_the_gate() -> None:
    """Its first trigger began before the old query stopped and waited at the gate inside latestOffset."""
    timeline = SwitchTimeline(stopped=T0, carried=T0 + 0.05, started=T0 + 0.06, resumed=T0 + 0.25, ahead=True)
    first = _report(16, T0 - 0.4, latestOffset=560, walCommit=30, triggerExecution=900)  # waited 0.46 s of it
    phases = timeline.phases([first])
    assert phases is not None
    assert phases["switch.started_ahead"] == 1.0
    assert phases["switch.first_trigger_s"] == 0.0
    assert phases["switch.plan_s"] == pytest.approx(0.10, abs=1e-3), "from the gate's opening to the plan"
    assert phases["switch.downtime_s"] == pytest.approx(0.25, abs=1e-3)
