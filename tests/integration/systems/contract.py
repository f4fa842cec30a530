"""The ``InputSystem`` contract, as checks any system's tests run against a real instance of it.

Each system's test module creates a stream on its real backend (the embedded
log's Delta tables, a real Kafka broker, a Kinesis emulator), produces
keyed records through the system's own producer, and calls
``check_input_system_contract``. What is checked is what the platform relies
on (``pipelines.systems.base``): positions opaque but ordered per partition,
reads that return the records in order with the position after them, bounded
reads that continue without gap or overlap, and counts that are either exact
or honestly unknown.

Each system's test also names the optional abilities it declares
(``pipelines.systems.base.ABILITIES``); the suite checks the system has
exactly those, and that each one keeps its own contract on the same records.
A renamed ``relayout`` therefore fails here, instead of planning a Kinesis job
as if its partitions were Kafka's.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping

import pytest

from pipelines.errors import StreamError
from pipelines.systems.base import (
    ABILITIES,
    RECORD_SCHEMA,
    Bounded,
    InputSystem,
    Position,
    SupportsCommitted,
    SupportsIdentity,
    SupportsLineage,
    SupportsRecordsRead,
    SupportsRelayout,
    SupportsStartAtTime,
)

CONTRACT_JOB = "contract-job"


def check_input_system_contract(
    system: InputSystem, stream: str, *, abilities: frozenset[type], records: int = 60, keys: int = 7
) -> None:
    """Produce ``records`` keyed records into an existing, empty ``stream`` and check every protocol rule.

    ``abilities`` are the optional abilities the system declares; it must have exactly these.
    """
    assert isinstance(system, InputSystem)
    has = {a for a in ABILITIES if isinstance(system, a)}
    assert has == set(abilities), (
        f"{type(system).__name__} has abilities {_names(has)}, its tests declare {_names(abilities)}"
    )
    meta = system.describe(stream)
    assert meta.system == system.system and meta.stream == stream
    assert meta.partition_count >= 1
    start = {p: m.earliest for p, m in meta.partitions.items()}

    batch = [(f"key-{i % keys}".encode(), f"value-{i}".encode(), {"i": str(i)}) for i in range(records)]
    placed = system.produce(stream, batch)
    assert len(placed) == records
    by_partition: dict[int, list[tuple[Position, bytes]]] = defaultdict(list)
    key_home: dict[bytes, int] = {}
    for (key, value, _), (partition, position) in zip(batch, placed, strict=True):
        assert partition in meta.partitions
        assert isinstance(position, str)
        by_partition[partition].append((position, value))
        assert key_home.setdefault(key, partition) == partition, "one key, one partition"
    for items in by_partition.values():  # positions increase in produce order within a partition
        keys_in_order = [system.position_key(pos) for pos, _ in items]
        assert keys_in_order == sorted(keys_in_order) and len(set(keys_in_order)) == len(keys_in_order)

    ends = system.end_positions(stream)
    assert set(ends) == set(meta.partitions)
    assert system.read_limits(stream, start) == {}, "no expansion, nothing held back"
    finals: dict[int, Position] = {}
    for partition in meta.partitions:
        expected = by_partition.get(partition, [])
        whole = system.read(stream, partition, start[partition], ends[partition])
        assert whole.records.schema.equals(RECORD_SCHEMA, check_metadata=False)
        assert whole.records.column("value").to_pylist() == [v for _, v in expected]
        assert whole.records.column("offset").to_pylist() == [pos for pos, _ in expected]
        assert set(whole.records.column("partition").to_pylist()) <= {partition}
        assert system.reached(stream, partition, whole.next_position, ends[partition])
        positions = [pos for pos, _ in expected]
        assert system.unread(stream, partition, positions, start[partition]) == [True] * len(positions)
        assert system.unread(stream, partition, positions, whole.next_position) == [False] * len(positions)
        counted = system.records_between(stream, partition, start[partition], ends[partition])
        assert counted is None or counted >= len(expected)  # gaps (compaction, markers) may make it an upper bound

        # Bounded reads of 3 continue exactly where the last one stopped, and stop at the end.
        position, seen = start[partition], []
        for _ in range(len(expected) + 2):
            part = system.read(stream, partition, position, Bounded(position, 3))
            assert part.records.num_rows <= 3
            seen += part.records.column("value").to_pylist()
            position = part.next_position
            if part.records.num_rows == 0:
                break
        assert seen == [v for _, v in expected]
        assert system.reached(stream, partition, position, ends[partition])
        system.acknowledge(CONTRACT_JOB, stream, {partition: position})  # never raises for a good position
        finals[partition] = position

        # A planned end never passes its limit and covers at most the admitted records.
        planned = system.advance(stream, {partition: start[partition]}, {partition: 2}, {partition: ends[partition]})
        end = planned[partition]
        if not isinstance(end, Bounded):
            assert system.position_key(end) <= system.position_key(ends[partition])
        got = system.read(stream, partition, start[partition], end)
        assert got.records.column("value").to_pylist() == [v for _, v in expected][:2]

    produced = [(partition, pos) for partition, items in by_partition.items() for pos, _ in items]
    if isinstance(system, SupportsRelayout):
        check_relayout(system, stream, start, finals, [v for _, v, _ in batch])
    if isinstance(system, SupportsRecordsRead):
        check_records_read(system, stream, start, finals, produced)
    if isinstance(system, SupportsLineage):
        check_lineage(system, stream, finals)
    if isinstance(system, SupportsCommitted):
        assert system.committed(CONTRACT_JOB, stream) == finals, "committed is what acknowledge wrote"
    if isinstance(system, SupportsIdentity):
        check_identity(system, stream)
    if isinstance(system, SupportsStartAtTime):  # last: it produces a second batch
        check_start_at_time(system, stream, start, ends, keys)


def check_identity(system: InputSystem, stream: str) -> None:
    """A stream's id is text, the same each time it is asked, and no other stream's; a missing stream is an error."""
    assert isinstance(system, SupportsIdentity)
    first = system.identity(stream)
    assert isinstance(first, str) and first and system.identity(stream) == first
    other = f"{stream}-other"
    system.create(other, 1)
    assert system.identity(other) != first, "two streams, two ids"
    with pytest.raises(StreamError):
        system.identity(f"{stream}-never-made")


def check_start_at_time(
    system: InputSystem, stream: str, start: Mapping[int, Position], ends: Mapping[int, Position], keys: int
) -> None:
    """A time before every record starts at the earliest, one after them all at the end, and one between two
    batches at each partition's first record of the second (its end where the second put none)."""
    assert isinstance(system, SupportsStartAtTime)
    if isinstance(system, SupportsRelayout):  # slots: a start at a time is read from, not an end position
        _check_slots_start_at_time(system, stream, start, keys)
        return
    assert system.positions_at(stream, 0) == dict(start), "every record is at or after 1970"
    time.sleep(0.02)
    mark = int(time.time() * 1000) + 1  # milliseconds: the records' timestamps are
    time.sleep(0.02)
    assert system.positions_at(stream, mark) == dict(ends), "no record at or after the time: each partition's end"
    second = [(f"key-{i % keys}".encode(), f"later-{i}".encode(), None) for i in range(keys - 1)]
    firsts: dict[int, Position] = {}
    for partition, position in system.produce(stream, second):
        firsts.setdefault(partition, position)
    assert system.positions_at(stream, mark) == {p: firsts.get(p, e) for p, e in ends.items()}


def _check_slots_start_at_time(system: InputSystem, stream: str, start: Mapping[int, Position], keys: int) -> None:
    """Slots started at a time before every record read them all; at a time after them, only what came later."""
    assert isinstance(system, SupportsStartAtTime)
    everything = sorted(v for p, pos in start.items() for v in _read_all(system, stream, p, pos))
    at_zero = system.positions_at(stream, 0)
    assert set(at_zero) == set(start)
    assert sorted(v for p, pos in at_zero.items() for v in _read_all(system, stream, p, pos)) == everything
    time.sleep(0.02)
    mark = int(time.time() * 1000) + 1
    time.sleep(0.02)
    later = system.positions_at(stream, mark)
    assert [v for p, pos in later.items() for v in _read_all(system, stream, p, pos)] == [], "nothing since then"
    second = [(f"key-{i % keys}".encode(), f"later-{i}".encode(), None) for i in range(keys - 1)]
    system.produce(stream, second)
    got = sorted(v for p, pos in later.items() for v in _read_all(system, stream, p, pos))
    assert got == sorted(v for _, v, _ in second), "exactly the records that arrived after the time"


def check_relayout(
    system: InputSystem, stream: str, start: Mapping[int, Position], finals: Mapping[int, Position], values: list[bytes]
) -> None:
    """Laid out on fewer, as many or more slots, every record is read once from the start and none from the end."""
    assert isinstance(system, SupportsRelayout)
    count = len(start)
    for slots in sorted({1, count, count + 1}):
        fresh = system.relayout(stream, start, slots)
        assert set(fresh) == set(range(slots)), f"relayout on {slots} slots names every slot once"
        read = [v for p in fresh for v in _read_all(system, stream, p, fresh[p])]
        assert sorted(read) == sorted(values), f"relayout on {slots} slots from the start reads every record once"
        done = system.relayout(stream, finals, slots)
        assert set(done) == set(range(slots))
        assert not [v for p in done for v in _read_all(system, stream, p, done[p])], (
            f"relayout on {slots} slots from where every record was read reads nothing again"
        )


def check_records_read(
    system: InputSystem,
    stream: str,
    start: Mapping[int, Position],
    finals: Mapping[int, Position],
    produced: list[tuple[int, Position]],
) -> None:
    """What the readers read between two checkpoints, each record once with the partition that read it."""
    assert isinstance(system, SupportsRecordsRead)
    assert sorted(system.records_read(stream, {}, finals)) == sorted(produced), "from the job's start"
    assert sorted(system.records_read(stream, start, finals)) == sorted(produced), "from the earliest positions"
    assert system.records_read(stream, finals, finals) == [], "nothing between a checkpoint and itself"


def check_lineage(system: InputSystem, stream: str, finals: Mapping[int, Position]) -> None:
    """Every unit with its parents, children and slot; every partition reads some unit; links stay inside."""
    assert isinstance(system, SupportsLineage)
    lineage = system.lineage(stream, finals)
    assert lineage, "a stream has at least one unit"
    for unit, info in lineage.items():
        assert {"parents", "children", "open", "slot", "state"} <= set(info), (unit, info)
        assert set(info["parents"]) | set(info["children"]) <= set(lineage), (unit, info)
    assert {info["slot"] for info in lineage.values()} >= set(finals), "every partition reads some unit"


def _read_all(system: InputSystem, stream: str, partition: int, position: Position) -> list[bytes]:
    seen: list[bytes] = []
    for _ in range(1000):
        part = system.read(stream, partition, position, Bounded(position, 50))
        seen += part.records.column("value").to_pylist()
        position = part.next_position
        if part.records.num_rows == 0:
            return seen
    raise AssertionError(f"partition {partition} never stopped returning records")


def _names(abilities: set[type] | frozenset[type]) -> str:
    return ", ".join(sorted(a.__name__ for a in abilities)) or "none"
