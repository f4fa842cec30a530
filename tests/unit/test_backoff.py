"""The one back-off formula: ceilings double up to the cap, each jitter stays in its band, deadlines hold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.backoff import Backoff


def test_the_ceiling_doubles_from_the_base_up_to_the_cap() -> None:
    backoff = Backoff(base_s=0.1, cap_s=1.0)
    assert [backoff.ceiling(a) for a in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert backoff.ceiling(10_000) == 1.0, "a long outage neither overflows nor passes the cap"


@given(attempt=st.integers(0, 200), u=st.floats(0, 1))
def test_full_jitter_draws_below_the_ceiling_and_equal_jitter_in_its_upper_half(attempt: int, u: float) -> None:
    def draw(lo: float, hi: float) -> float:
        return lo + u * (hi - lo)

    full = Backoff(0.005, 0.25, "full", draw=draw)
    equal = Backoff(0.005, 0.25, "equal", draw=draw)
    ceiling = full.ceiling(attempt)
    assert 0 <= full.delay(attempt) <= ceiling
    assert ceiling / 2 <= equal.delay(attempt) <= ceiling


def test_a_wait_sleeps_its_delay_but_never_past_the_deadline() -> None:
    slept: list[float] = []
    now = [100.0]
    backoff = Backoff(1.0, 8.0, "equal", draw=lambda lo, hi: hi, sleep=slept.append, clock=lambda: now[0])
    assert backoff.wait(2) == 4.0
    assert backoff.wait(2, deadline=101.5) == 1.5
    assert backoff.wait(2, deadline=99.0) == 0.0, "a deadline already passed waits nothing"
    assert slept == [4.0, 1.5, 0.0]
