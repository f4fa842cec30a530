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


def _recording(slept: list[float], now: list[float] | None = None) -> Backoff:
    clock = (lambda: now[0]) if now is not None else (lambda: 0.0)
    return Backoff(1.0, 8.0, "equal", draw=lambda lo, hi: hi, sleep=slept.append, clock=clock)


def test_attempts_wait_between_tries_never_before_the_first_and_stop_at_the_count() -> None:
    slept: list[float] = []
    assert list(_recording(slept).attempts(4)) == [0, 1, 2, 3]
    assert slept == [1.0, 2.0, 4.0], "three waits for four attempts, none after the last"


def test_attempts_toward_a_deadline_cap_the_wait_and_leave_giving_up_to_the_caller() -> None:
    slept: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    backoff = Backoff(1.0, 8.0, "equal", draw=lambda lo, hi: hi, sleep=sleep, clock=lambda: now[0])
    made = []
    for attempt in backoff.attempts(deadline=2.5):
        made.append(attempt)
        if attempt == 3:
            break
    assert made == [0, 1, 2, 3], "past the deadline it goes on: the caller decides when it has waited enough"
    assert slept == [1.0, 1.5, 0.0], "the second wait ends at the deadline, and none runs past it"


def test_retry_makes_the_call_again_only_while_its_error_is_retriable() -> None:
    slept: list[float] = []
    calls: list[int] = []
    seen: list[str] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("busy")
        return "done"

    def retriable(error: BaseException) -> bool:
        seen.append(type(error).__name__)
        return isinstance(error, TimeoutError)

    assert _recording(slept).retry(flaky, attempts=5, retriable=retriable) == "done"
    assert len(calls) == 3 and slept == [1.0, 2.0] and seen == ["TimeoutError", "TimeoutError"]

    def broken() -> str:
        calls.append(1)
        raise ValueError("not transient")

    calls.clear()
    with pytest.raises(ValueError, match="not transient"):
        _recording(slept).retry(broken, attempts=5, retriable=retriable)
    assert len(calls) == 1, "an error the caller does not call retriable is raised at once"


def test_retry_raises_the_last_retriable_error_after_the_attempts_and_lets_the_caller_count_it() -> None:
    slept: list[float] = []
    seen: list[BaseException] = []
    refreshed: list[BaseException] = []

    def always_busy() -> None:
        raise TimeoutError(f"busy {len(seen)}")

    with pytest.raises(TimeoutError, match="busy 2"):
        _recording(slept).retry(
            always_busy, attempts=3, retriable=lambda e: seen.append(e) is None, before_retry=refreshed.append
        )
    assert len(seen) == 3, "retriable sees the last error too (a throttle is counted even when it ends the call)"
    assert len(refreshed) == 2 and len(slept) == 2
