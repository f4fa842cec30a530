"""The back-off and reporting rhythm of an input that stops answering, on a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.runtime.outage import InputOutage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _outage(clock: Clock) -> InputOutage:
    return InputOutage(base_s=0.2, cap_s=5.0, report_every_s=30.0, clock=clock, jitter=lambda lo, hi: hi)


def test_waits_double_up_to_the_cap_and_reports_once_per_period() -> None:
    clock = Clock()
    outage = _outage(clock)
    waits, reports = [], []
    for _ in range(12):
        wait, report = outage.failed()
        waits.append(wait)
        reports.append(report)
        clock.now += wait
    assert waits[:6] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert max(waits) == 5.0
    assert reports[0] and sum(reports) == 1 + int((sum(waits[:-1])) // 30), "the first failure, then every 30 s"
    assert outage.answered() == pytest.approx(sum(waits))
    assert outage.answered() is None, "a second answer ends no outage"
    assert outage.failed() == (0.2, True), "a new outage starts from the base and is reported at once"


@given(st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=60))
def test_a_wait_is_never_above_the_cap_nor_below_half_its_ceiling(draws: list[float]) -> None:
    clock = Clock()
    outage = InputOutage(clock=clock, jitter=lambda lo, hi: lo + (hi - lo) * draws[0])
    for d in draws:
        wait, _ = outage.failed()
        assert 0 < wait <= outage.cap_s
        clock.now += d
