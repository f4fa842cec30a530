"""The input watcher's memory: each finding wakes the DAG once, again only when overdue, and anew once it was gone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.input_watch import Finding, WatchMemory

ABSORB = Finding("j: deltalog/e 2 -> 4 on v1: absorb", again=True)
REFUSED = Finding("j: deltalog/e 3 -> 4 on v2: refused", again=False)


def test_an_absorption_is_fired_once_then_again_only_after_again_s() -> None:
    memory = WatchMemory(again_s=300)
    assert memory.due([ABSORB], now=0) == [ABSORB.key]
    assert memory.due([ABSORB], now=20) == []
    assert memory.due([ABSORB], now=299.9) == []
    assert memory.due([ABSORB], now=300) == [ABSORB.key]  # its run failed or was killed: wake the DAG again
    assert memory.due([ABSORB], now=320) == []


def test_a_refusal_is_said_once_however_long_it_stays_and_anew_if_it_comes_back() -> None:
    memory = WatchMemory(again_s=1)
    assert memory.due([REFUSED], now=0) == [REFUSED.key]
    assert memory.due([REFUSED], now=1_000) == []
    assert memory.due([], now=1_001) == []  # fixed (a new model), then broken again: a new refusal
    assert memory.due([REFUSED], now=1_002) == [REFUSED.key]


def test_again_s_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        WatchMemory(again_s=0)


@given(st.lists(st.lists(st.sampled_from([ABSORB, REFUSED]), max_size=3), max_size=30))
def test_a_finding_seen_without_a_gap_is_fired_at_most_once_per_again_s(looks: list[list[Finding]]) -> None:
    memory = WatchMemory(again_s=10)
    fired: dict[str, float] = {}  # key -> when it was last fired, while it has been found at every look since
    for i, found in enumerate(looks):
        keys = {f.key for f in found}
        fired = {k: t for k, t in fired.items() if k in keys}
        for key in memory.due(found, now=float(i)):
            assert key in keys
            assert key not in fired or i - fired[key] >= 10, (key, i, fired)
            fired[key] = float(i)
