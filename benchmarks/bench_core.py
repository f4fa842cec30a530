"""Benchmark of the pure core: job-model generation, checkpoint migration, key-bucket hashing.

Prints figures and ratios against baselines measured in the same run (these
machines are noisy, so only ratios compare across runs):

* model generation at factor 16 vs the same inputs at factor 1 (the cost of virtual tasks);
* checkpoint migration 16 -> 8 and 16 -> 12 vs copying the map (the floor of touching every entry);
* key-bucket hashing vs a bare loop that calls Python's builtin ``hash`` per key.

    python -m benchmarks.bench_core [--partitions 10000] [--factor 16] [--records 1000000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from pipelines.core.checkpoints import CheckpointMap, migrate_checkpoints
from pipelines.core.groupers import plan_job_model
from pipelines.core.hashing import key_buckets
from pipelines.core.ssp import SystemStream
from pipelines.usage import Parser


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """Best of ``repeat`` wall-clock runs, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--factor", type=int, default=16)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--containers", type=int, default=64)
    args = parser.parse_args()
    inputs = {SystemStream("kafka", "events"): args.partitions}

    print(f"# job model: {args.partitions:,} partitions, {args.containers} containers")
    t1, _ = timed(lambda: plan_job_model("bench", 1, inputs, factor=1, containers=args.containers))
    tx, model = timed(lambda: plan_job_model("bench", 1, inputs, factor=args.factor, containers=args.containers))
    print(f"factor 1:  {t1 * 1000:8.1f} ms  ({args.partitions:,} tasks)")
    print(f"factor {args.factor}: {tx * 1000:8.1f} ms  ({model.task_count:,} virtual tasks)  ratio {tx / t1:.1f}x")
    ts, text = timed(model.dumps)
    print(f"serialize: {ts * 1000:8.1f} ms  ({len(text) / 1e6:.1f} MB JSON)")

    offsets = {ssp: str(i * 7 % 1_000_003) for i, ssp in enumerate(sorted(model.ssp_to_task()))}
    old = CheckpointMap(args.factor, offsets)
    partitions = old.partitions()
    print(f"\n# checkpoint migration: {len(offsets):,} checkpoints")
    tc, _ = timed(lambda: CheckpointMap(args.factor, dict(offsets)))
    migrations: dict[str, float] = {}
    for target in (args.factor // 2, args.factor * 2, args.factor * 3 // 4):
        tm, new = timed(lambda t=target: migrate_checkpoints(old, t, partitions, earliest={}, position_key=int))
        print(
            f"{args.factor} -> {target:<3}: {tm * 1000:8.1f} ms  ({len(new.offsets):,} new checkpoints)  "
            f"{tm / tc:.0f}x a plain copy ({tc * 1000:.1f} ms)"
        )
        migrations[f"migrate_{args.factor}_to_{target}_s"] = round(tm, 4)

    n = args.records
    keys: list[bytes | None] = [f"user-{i % 100_003}".encode() for i in range(n)]
    offs = list(range(n))
    print(f"\n# key-bucket hashing: {n:,} records")
    tb, _ = timed(lambda: [hash(k) % args.factor for k in keys])
    th, _ = timed(lambda: key_buckets(keys, offs, args.factor))
    print(f"baseline hash():     {n / tb / 1e6:6.2f} M records/s")
    print(f"murmur3 key buckets: {n / th / 1e6:6.2f} M records/s  ({th / tb:.2f}x the baseline's time)")
    figures = {
        # the name for the default size; other sizes are labelled by their own
        ("job_model_10k_x16_s" if (args.partitions, args.factor) == (10_000, 16) else "job_model_s"): round(tx, 4),
        "job_model_vs_factor_1": round(tx / t1, 2),
        "serialize_s": round(ts, 4),
        **migrations,
        "hash_m_records_per_s": round(n / th / 1e6, 3),
        "hash_vs_builtin_time": round(th / tb, 2),
    }
    print(json.dumps({"bench": "core", "figures": figures}))


if __name__ == "__main__":
    main()
