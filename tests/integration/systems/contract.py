"""The ``InputSystem`` contract, as checks any system's tests run against a real instance of it.

Each system's test module creates a stream on its real backend (the embedded
log's Delta tables, a real Kafka broker, a Kinesis emulator), produces
keyed records through the system's own producer, and calls
``check_input_system_contract``. What is checked is what the platform relies
on (``pipelines.systems.base``): positions opaque but ordered per partition,
reads that return the records in order with the position after them, bounded
reads that continue without gap or overlap, and counts that are either exact
or honestly unknown.
"""

from __future__ import annotations

from collections import defaultdict

from pipelines.systems.base import RECORD_SCHEMA, Bounded, InputSystem, Position


def check_input_system_contract(system: InputSystem, stream: str, records: int = 60, keys: int = 7) -> None:
    """Produce ``records`` keyed records into an existing, empty ``stream`` and check every protocol rule."""
    assert isinstance(system, InputSystem)
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
        system.acknowledge("contract-job", stream, {partition: position})  # never raises for a good position

        # A planned end never passes its limit and covers at most the admitted records.
        planned = system.advance(stream, {partition: start[partition]}, {partition: 2}, {partition: ends[partition]})
        end = planned[partition]
        if not isinstance(end, Bounded):
            assert system.position_key(end) <= system.position_key(ends[partition])
        got = system.read(stream, partition, start[partition], end)
        assert got.records.column("value").to_pylist() == [v for _, v in expected][:2]
