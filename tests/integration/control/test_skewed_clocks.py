"""No wall clock orders anything across hosts: writers whose clocks are minutes apart, one real order, one answer.

Each writer is a host of its own (``tests.skew.SkewedHost``): its wall clock
off by up to ``SKEW_S`` either way, and its own reading of the store's clock.
The writers act in a known real order on real Delta tables; the reader, on
yet another skewed host, must pick what that order says: the start
checkpoints written last, the lock's holder and its whole lease, the driver
that still beats, an event's latest step.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.control.checkpoints import INITIAL_BATCH
from pipelines.control.locks import ScalingInProgressError
from pipelines.control.scaling_events import EventStatus, ScalingEvent
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.ssp import SystemStreamPartition
from pipelines.operations.scaling.readings import last_heartbeat
from pipelines.storage.home import Home
from tests.skew import SkewedHost

pytestmark = pytest.mark.integration

SKEW_S = 15 * 60.0
TTL_S = 600.0
skews = st.floats(min_value=-SKEW_S, max_value=SKEW_S, allow_nan=False)
boots = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
EXAMPLES = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def fresh_home() -> Iterator[Home]:
    with tempfile.TemporaryDirectory(prefix="skew-") as folder:
        yield Home(Path(folder) / "home")


def hosts_of(home: Home, clocks: list[tuple[float, float]]) -> list[SkewedHost]:
    return [SkewedHost(home, wall, boot) for wall, boot in clocks]


def ssp(partition: int) -> SystemStreamPartition:
    return SystemStreamPartition("deltalog", "events", partition)


def start_map(offset: int) -> CheckpointMap:
    return CheckpointMap(1, {ssp(0): str(offset), ssp(1): str(offset + 1)})


@EXAMPLES
@given(
    clocks=st.lists(st.tuples(skews, boots), min_size=2, max_size=4),
    writers=st.lists(st.integers(min_value=0, max_value=3), min_size=2, max_size=6),
    reader=st.tuples(skews, boots),
)
def test_the_start_checkpoints_written_last_are_the_start(
    clocks: list[tuple[float, float]], writers: list[int], reader: tuple[float, float]
) -> None:
    """A planner, then drivers carrying forward, on hosts whose clocks disagree: the last write is the start."""
    with fresh_home() as home:
        hosts = hosts_of(home, clocks)
        for i, w in enumerate(writers):  # the real order: i
            host = hosts[w % len(hosts)]
            with host.wall():
                host.control().checkpoints.write("job", 2, start_map(100 * (i + 1)), batch_id=INITIAL_BATCH)
        last = 100 * len(writers)
        look = SkewedHost(home, *reader)
        with look.wall():
            control = look.control()
            assert control.checkpoints.start("job", 2) == {ssp(0): str(last), ssp(1): str(last + 1)}
            assert control.checkpoints.latest("job", 2) == start_map(last)
            # a committed batch still follows every start row, whoever wrote what when
            with hosts[0].wall():
                hosts[0].control().checkpoints.write("job", 2, CheckpointMap(1, {ssp(0): "7"}), batch_id=0)
            assert control.checkpoints.latest("job", 2).offsets == {ssp(0): "7", ssp(1): str(last + 1)}


Op = tuple[int, str]  # (host, "acquire" | "release")


@EXAMPLES
@given(
    clocks=st.lists(st.tuples(skews, boots), min_size=2, max_size=3),
    ops=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["acquire", "release"])), min_size=1, max_size=7),
    reader=st.tuples(skews, boots),
)
def test_the_lock_is_held_by_whom_the_real_order_says_for_its_whole_lease(
    clocks: list[tuple[float, float]], ops: list[Op], reader: tuple[float, float]
) -> None:
    """Acquire, renew, release from hosts minutes apart: a hold is never expired early nor taken by another."""
    with fresh_home() as home:
        hosts = hosts_of(home, clocks)
        holder: int | None = None  # the model: who holds it in the real order
        for h, op in ops:
            h %= len(hosts)
            host, owner = hosts[h], f"run-on-host-{h}"
            with host.wall():
                lock = host.lock()
                if op == "release":
                    assert lock.release("job", owner) is (holder == h)
                    holder = None if holder == h else holder
                elif holder is None or holder == h:
                    state = lock.acquire("job", owner, "rescale", ttl_s=TTL_S)
                    assert state.status == ("renewed" if holder == h else "acquired")
                    holder = h
                else:
                    with pytest.raises(ScalingInProgressError, match=f"run-on-host-{holder} holds it"):
                        lock.acquire("job", owner, "rescale", ttl_s=TTL_S)
        look = SkewedHost(home, *reader)
        with look.wall():
            state = look.lock().state("job")
        if holder is None:
            assert state is None or not state.held
        else:
            assert state is not None and state.held and state.owner == f"run-on-host-{holder}"
            assert TTL_S - 30 < state.remaining_s <= TTL_S + 2, state


@EXAMPLES
@given(
    clocks=st.lists(st.tuples(skews, boots), min_size=2, max_size=3),
    ended=st.lists(st.booleans(), min_size=1, max_size=3),
    reader=st.tuples(skews, boots),
)
def test_a_driver_is_live_while_it_beats_and_not_after_it_ended_whatever_the_clocks(
    clocks: list[tuple[float, float]], ended: list[bool], reader: tuple[float, float]
) -> None:
    """Drivers on skewed hosts start, beat and (some) stop in turn: the one still beating is the live one."""
    with fresh_home() as home:
        hosts = hosts_of(home, clocks)
        for i, stops in enumerate(ended):
            host = hosts[i % len(hosts)]
            with host.wall():
                driver = host.registration("job")
                driver.start()
                driver.beat(i + 1, 0)
                if stops:
                    driver.end(model_version=i + 1, batch_id=3)
        look = SkewedHost(home, *reader)
        with look.wall():
            beat = last_heartbeat(look.control(), "job")
        assert beat is not None and beat["age_s"] < 30, beat
        beating = {i + 1 for i, stops in enumerate(ended) if not stops}
        if beating:
            assert beat["live"] and beat["model_version"] in beating, beat
        else:
            assert not beat["live"], beat


@EXAMPLES
@given(clocks=st.lists(st.tuples(skews, boots), min_size=2, max_size=4), reader=st.tuples(skews, boots))
def test_an_events_latest_step_is_the_one_recorded_last(
    clocks: list[tuple[float, float]], reader: tuple[float, float]
) -> None:
    """A rescale's steps run on different Airflow workers: its state is the step recorded last."""
    steps = [EventStatus.STOPPED, EventStatus.MIGRATED, EventStatus.ACTIVATED, EventStatus.CAUGHT_UP]
    with fresh_home() as home:
        hosts = hosts_of(home, clocks)
        with hosts[0].wall():
            event = ScalingEvent.start("job", "rescale", at=hosts[0].clock.now(), from_version=1)
            hosts[0].control().events.record(event)
            later = ScalingEvent.start("job", "rescale", at=hosts[0].clock.now(), from_version=2)
        for i, status in enumerate(steps):
            host = hosts[(i + 1) % len(hosts)]
            with host.wall():
                control = host.control()
                (current,) = [e for e in control.events.history("job") if e.event_id == event.event_id]
                control.events.record(current.moved(status, to_version=2 if i else None, step=i))
        last = hosts[-1]
        with last.wall():
            control = last.control()
            (current,) = control.events.history("job")
            control.events.record(current.finish(EventStatus.VERIFIED, at=last.clock.now()))
            control.events.record(later)
        look = SkewedHost(home, *reader)
        with look.wall():
            first, second = look.control().events.history("job")
        assert (first.event_id, first.status, first.details["step"]) == (event.event_id, EventStatus.VERIFIED, 3)
        assert second.event_id == later.event_id
        assert first.finished_at is not None and 0 <= (first.finished_at - first.started_at).total_seconds() < 30


def test_a_lease_lasts_its_ttl_on_the_stores_clock_whatever_the_holders_and_readers_clocks(tmp_path: Path) -> None:
    """A holder half an hour ahead: its lease still ends after its TTL; half an hour behind: it does not end at once."""
    home = Home(tmp_path / "home")
    ahead, behind = SkewedHost(home, +1800.0, 3e5), SkewedHost(home, -1800.0, -7e4)
    with ahead.wall():
        ahead.lock().acquire("fast", "run-ahead", "rescale", ttl_s=1.5)
    with behind.wall():
        behind.lock().acquire("slow", "run-behind", "rescale", ttl_s=120.0)
        taken = time.monotonic()
        with pytest.raises(ScalingInProgressError, match="run-ahead holds it"):
            behind.lock().acquire("fast", "run-next", "rescale")
        while time.monotonic() - taken < 30:  # the ahead host's lease runs out after 1.5 s of real time
            try:
                state = behind.lock().acquire("fast", "run-next", "rescale")
                break
            except ScalingInProgressError:
                time.sleep(0.1)
        waited = time.monotonic() - taken
    assert (state.status, state.owner) == ("taken over", "run-next")
    assert 1.0 < waited < 10, f"a lease of 1.5 s was taken over after {waited:.1f}s"
    with ahead.wall(), pytest.raises(ScalingInProgressError, match="run-behind holds it"):
        ahead.lock().acquire("slow", "run-ahead", "rescale")  # 30 min behind is not 30 min expired
