"""Benchmark of the Kinesis input system on kinesis-mock, with the embedded log as the baseline in the same run.

Reads go through the ``InputSystem`` protocol the way the runtime drives it
(``advance`` over every slot, one bounded ``read`` per slot, the next
checkpoint from the read), without Spark, so the figures are the system's:

* records/s per shard draining a backlog, at Kinesis' limits (5 GetRecords
  calls/s per shard, 2 MB/s) and unthrottled, against the embedded log's
  records/s per partition with the same batch size;
* user records/s per shard at Kinesis' limits when the same records come as
  KPL aggregates (``--kpl`` user records per Kinesis record, packed by
  awslabs' aggregator), against the plain records' figure of the same run:
  the KPL packs records to get past Kinesis' 1,000 records/s per shard
  limit on writes, and the reads take them apart;
* the time from a split to the first record read from a child shard, while a
  slot is reading the parent (parent before child: the parent's end must be
  read and checkpointed first), over ``--reshards`` splits.

    python -m benchmarks.bench_kinesis [--records 20000] [--batch 2000] [--reshards 3]

Ends with one JSON line, ``{"bench": "kinesis", "figures": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

from pipelines.systems.base import InputSystem
from pipelines.systems.deltalog import DeltaLog
from pipelines.systems.kinesis import KinesisSystem
from pipelines.systems.kinesis.positions import decode_record
from pipelines.usage import Parser
from testbed.servers.kinesis_emulator import KinesisEmulator


def records(n: int, keys: int = 500) -> list[tuple[bytes, bytes, None]]:
    return [(f"key-{i % keys}".encode(), b"x" * 100, None) for i in range(n)]


def drain(system: InputSystem, stream: str, positions: dict[int, str], batch: int) -> tuple[int, float]:
    """Read every slot until all are empty; (records, seconds)."""
    started, total = time.perf_counter(), 0
    while True:
        ends = system.advance(stream, positions, dict.fromkeys(positions, batch), system.end_positions(stream))
        got = 0
        for p in sorted(positions):
            end = ends[p]
            result = system.read(stream, p, positions[p], end)
            positions[p] = result.next_position
            got += result.records.num_rows
        total += got
        if got == 0:
            return total, time.perf_counter() - started


def produce(system: InputSystem, stream: str, n: int) -> None:
    for start in range(0, n, 5000):
        system.produce(stream, records(min(5000, n - start)))


def produce_kpl(system: InputSystem, stream: str, n: int, per_aggregate: int) -> int:
    """``n`` user records as KPL aggregates of ``per_aggregate`` records of one key each; the Kinesis records."""
    from aws_kinesis_agg.aggregator import RecordAggregator  # type: ignore[import-untyped]

    packed = []
    for start in range(0, n, per_aggregate):
        agg = RecordAggregator()
        key = f"key-{(start // per_aggregate) % 500}"
        for _ in range(min(per_aggregate, n - start)):
            agg.add_user_record(key, b"x" * 100)
        pk, _ehk, blob = agg.clear_and_get().get_contents()
        packed.append((pk.encode(), bytes(blob), None))
    for start in range(0, len(packed), 500):
        system.produce(stream, packed[start : start + 500])
    return len(packed)


def reshard_to_child(system: KinesisSystem, stream: str, shard: str, batch: int) -> float:
    """Seconds from a split of ``shard`` (with a backlog in it) to the first record read from a child."""
    meta = system.describe(stream)
    positions = {p: m.earliest for p, m in meta.partitions.items()}
    produce(system, stream, 2000)
    t0 = time.perf_counter()
    children = set(system.split_shard(stream, shard))
    produce(system, stream, 2000)
    while time.perf_counter() - t0 < 120:
        ends = system.advance(stream, positions, dict.fromkeys(positions, batch), {})
        for p in sorted(positions):
            result = system.read(stream, p, positions[p], ends[p])
            positions[p] = result.next_position
            for offset in result.records.column("offset").to_pylist():
                if decode_record(offset).shard in children:
                    return time.perf_counter() - t0
    raise RuntimeError("no child record read within 120 s")


def main() -> None:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2_000, help="records per slot per micro-batch")
    parser.add_argument("--reshards", type=int, default=3)
    parser.add_argument("--kpl", type=int, default=50, help="user records per KPL aggregate")
    args = parser.parse_args()
    figures: dict[str, Any] = {"records": args.records, "shards": args.shards, "batch": args.batch}

    with tempfile.TemporaryDirectory() as root:
        log = DeltaLog(root)
        log.create("bench", args.shards)
        produce(log, "bench", args.records)
        n, s = drain(log, "bench", dict.fromkeys(range(args.shards), "0"), args.batch)
        figures["deltalog_records_per_s_per_partition"] = round(n / s / args.shards)
        print(f"embedded log:          {n:,} records in {s:.2f} s: {n / s / args.shards:,.0f} records/s per partition")

    with KinesisEmulator() as endpoint:
        for label, rate in (("at Kinesis limits", 5.0), ("unthrottled", 1000.0)):
            system = KinesisSystem({"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": rate})
            stream = f"bench-{int(rate)}"
            system.create(stream, args.shards)
            produce(system, stream, args.records)
            positions = {p: m.earliest for p, m in system.describe(stream).partitions.items()}
            n, s = drain(system, stream, positions, args.batch)
            assert n == args.records, f"read {n} of {args.records}"
            key = "kinesis_records_per_s_per_shard_" + ("limited" if rate == 5.0 else "unthrottled")
            figures[key] = round(n / s / args.shards)
            print(f"kinesis {label:18s} {n:,} records in {s:.2f} s: {n / s / args.shards:,.0f} records/s per shard")

        system = KinesisSystem({"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": 5.0})
        system.create("bench-kpl", args.shards)
        sent = produce_kpl(system, "bench-kpl", args.records, args.kpl)
        positions = {p: m.earliest for p, m in system.describe("bench-kpl").partitions.items()}
        n, s = drain(system, "bench-kpl", positions, args.batch)
        assert n == args.records, f"read {n} user records of {args.records}"
        figures["kinesis_kpl_user_records_per_s_per_shard_limited"] = round(n / s / args.shards)
        figures["kpl_vs_plain_limited"] = round(
            n / s / args.shards / figures["kinesis_records_per_s_per_shard_limited"], 2
        )
        print(
            f"kinesis {'KPL aggregates':18s} {n:,} user records in {sent:,} Kinesis records, {s:.2f} s: "
            f"{n / s / args.shards:,.0f} user records/s per shard ({figures['kpl_vs_plain_limited']}x plain)"
        )

        system = KinesisSystem({"endpoint_url": endpoint, "region": "us-east-1"})  # Kinesis' limits
        waits = []
        for i in range(args.reshards):
            stream = f"reshard-{i}"
            system.create(stream, args.shards)
            waits.append(reshard_to_child(system, stream, "shardId-000000000000", args.batch))
        figures["reshard_to_first_child_record_s"] = [round(w, 3) for w in waits]
        print(
            f"split -> first child record read: median {statistics.median(waits):.2f} s, "
            f"max {max(waits):.2f} s over {len(waits)} splits (4,000 records behind the split, at Kinesis limits)"
        )
    print(json.dumps({"bench": "kinesis", "figures": figures}))


if __name__ == "__main__":
    main()
