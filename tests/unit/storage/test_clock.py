"""The store's clock read through probes: bounds that only narrow, an estimate that moves only when proven wrong."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipelines.storage.clock import OffsetEstimate, StoreClock

pytestmark = pytest.mark.unit

STORE_MINUS_BOOT = 1_700_000_000.25  # the store's epoch time minus this host's boot clock


class Host:
    """A host's boot clock (set by the test) and a probe of a store whose stamps are truncated to ``resolution``."""

    def __init__(self, resolution: float, latency: float = 0.05) -> None:
        self.boot = 1000.0
        self.resolution, self.latency = resolution, latency
        self.probes = 0

    def probe(self) -> tuple[float, float, float]:
        self.probes += 1
        before = self.boot
        stamped = before + self.latency / 2 + STORE_MINUS_BOOT  # the store stamps half way through the write
        stamp = stamped - stamped % self.resolution if self.resolution else stamped
        self.boot += self.latency
        return before, stamp, self.boot


def test_a_store_that_truncates_to_the_second_is_read_to_within_a_second_and_narrows_with_probes() -> None:
    host = Host(resolution=1.0)
    clock = StoreClock(host.probe, reprobe_s=10.0, boot=lambda: host.boot)
    first = clock.now_s() - (host.boot + STORE_MINUS_BOOT)
    assert abs(first) <= 1.0
    for _ in range(40):  # probes at every phase of the second narrow the bounds to about the write's latency
        host.boot += 10.37
        clock.now_s()
    assert host.probes == 41
    assert abs(clock.now_s() - (host.boot + STORE_MINUS_BOOT)) <= host.latency + 1e-6


def test_stamps_of_one_process_strictly_increase_and_follow_its_boot_clock_between_probes() -> None:
    host = Host(resolution=0.0)
    clock = StoreClock(host.probe, reprobe_s=60.0, boot=lambda: host.boot)
    a = clock.now_s()
    b = clock.now_s()
    host.boot += 12.5
    c = clock.now_s()
    assert a < b < c and c - a == pytest.approx(12.5, abs=1e-5)
    assert host.probes == 1


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=120.0), min_size=1, max_size=30),
    resolution=st.sampled_from([0.0, 1.0]),
    latency=st.floats(min_value=0.0, max_value=0.5),
)
@example(gaps=[0.75], resolution=0.0, latency=0.0)  # a fine stamp on a whole second
def test_the_estimate_stays_within_the_bounds_every_probe_proves(
    gaps: list[float], resolution: float, latency: float
) -> None:
    """Whatever the probes' timing, the estimate is never further from the truth than one probe's uncertainty."""
    host = Host(resolution, latency)
    estimate = OffsetEstimate()
    whole = False  # a fine stamp that lands on a whole second reads like a truncated one: a second's uncertainty
    for gap in gaps:
        host.boot += gap
        before, stamp, after = host.probe()
        whole = whole or stamp % 1 == 0
        estimate.add(before, stamp, after)
        assert estimate.offset is not None
        assert estimate.low <= estimate.offset <= estimate.high
        assert estimate.low - 1e-6 <= STORE_MINUS_BOOT <= estimate.high + 1e-6  # the truth is never ruled out
        uncertainty = 1.0 if whole else max(resolution, 0.02)
        assert abs(estimate.offset - STORE_MINUS_BOOT) <= latency + uncertainty + 1e-6


def test_a_store_whose_clock_jumped_is_followed_not_fought() -> None:
    estimate = OffsetEstimate()
    estimate.add(100.0, 500.5, 100.1)
    estimate.add(200.0, 900.5, 200.1)  # 300 s off what the first probe proved: the bounds start again
    assert estimate.offset is not None and 700.4 <= estimate.offset <= 700.52


def test_a_process_the_store_refuses_writes_to_reads_its_own_wall_clock_and_says_so() -> None:
    def refused() -> tuple[float, float, float]:
        raise PermissionError("read-only home")

    clock = StoreClock(refused)
    before = time.time()
    now = clock.now_s()
    assert clock.borrowed and before - 0.01 <= now <= time.time() + 0.01
