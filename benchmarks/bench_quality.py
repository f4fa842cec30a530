"""Benchmark of the data-quality validation: how long proving one window of a million sink rows takes.

A synthetic sink (the sink's lineage columns plus the demo's ``event_key``/``seq``, factor 4, made with
numpy) with its input records, then:

* pandas: ``checks.annotate`` (vectorized flags) + the GX suites (``report.validate_annotated``, Data Docs
  included), the path ``python -m pipelines verify`` takes; and ``checks.verify_rows`` (the per-key loop the
  demo uses) as the in-run baseline;
* Spark (``--spark``): the same checks as Spark SQL over a parquet copy on a local session: loss by anti
  join, duplicates by GROUP BY, per-key order by LAG over the sink order, routing on the distinct
  (key, version, task, bucket) tuples (murmur3 with seed 0 is not Spark's ``hash``, which uses seed 42).

    python -m benchmarks.bench_quality [--rows 1000000] [--keys 10000] [--spark] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from pipelines.quality.checks import annotate, verify_rows
from pipelines.quality.synthetic import synthetic_window
from pipelines.usage import Parser

FACTOR = 4


def bench_pandas(expected, rows, dead, root: Path) -> dict[str, float]:
    from pipelines.quality.report import validate_annotated

    start = time.perf_counter()
    annotated = annotate(expected, rows, dead, lambda v: FACTOR, "seq")
    flags = time.perf_counter() - start
    verdict = annotated.verdict()
    start = time.perf_counter()
    results = validate_annotated(root, "bench", "run:bench", annotated, verdict, docs=True)
    gx_s = time.perf_counter() - start
    assert verdict.ok and all(r["success"] for r in results), verdict.summary()
    total = flags + gx_s
    n = len(rows)
    print(f"pandas flags (annotate)     {flags:8.2f} s  {n / flags:12,.0f} rows/s")
    print(f"pandas GX suites + docs     {gx_s:8.2f} s  {n / gx_s:12,.0f} rows/s")
    print(f"pandas total                {total:8.2f} s  {n / total:12,.0f} rows/s")
    start = time.perf_counter()
    baseline = verify_rows(expected, rows, dead, lambda v: FACTOR, "seq")
    loop = time.perf_counter() - start
    assert baseline.ok
    print(f"baseline verify_rows (loop) {loop:8.2f} s  {n / loop:12,.0f} rows/s  (total/baseline {total / loop:.2f}x)")
    return {"pandas_total_s": round(total, 3), "pandas_rows_per_s": round(n / total), "vs_loop": round(total / loop, 3)}


def bench_spark(expected, rows, root: Path, master: str) -> dict[str, float]:
    from pipelines.core.hashing import key_bucket
    from pipelines.core.model import TaskName
    from pipelines.runtime.session import build_session

    rows.to_parquet(root / "sink.parquet", index=False)
    expected.to_parquet(root / "expected.parquet", index=False)
    start = time.perf_counter()
    spark = build_session(master, "bench-quality", **{"spark.sql.shuffle.partitions": "4"})
    print(f"spark session start         {time.perf_counter() - start:8.2f} s  (not counted)")
    try:
        spark.read.parquet(str(root / "sink.parquet")).createOrReplaceTempView("sink")
        spark.read.parquet(str(root / "expected.parquet")).createOrReplaceTempView("expected")
        queries = {
            "lost": "SELECT count(*) FROM expected e LEFT ANTI JOIN sink s "
            "ON e.stream = s.stream AND e.partition = s.partition AND e.offset = s.offset",
            "duplicated": "SELECT count(*) FROM (SELECT stream, partition, offset FROM sink "
            "GROUP BY stream, partition, offset HAVING count(*) > 1)",
            "out of order": "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY key "
            "ORDER BY model_version, batch_id, task_seq) AS prev FROM sink) WHERE prev IS NOT NULL AND seq <= prev",
        }
        start = time.perf_counter()
        counts = {name: spark.sql(sql).collect()[0][0] for name, sql in queries.items()}
        tuples = spark.sql(
            "SELECT DISTINCT key, offset_if_null, virtual_task, key_bucket FROM (SELECT key, "
            "CASE WHEN key IS NULL THEN offset END AS offset_if_null, virtual_task, key_bucket "
            "FROM sink)"
        ).collect()
        counts["misrouted"] = sum(
            1
            for k, o, t, b in tuples
            if b != key_bucket(k, o, FACTOR) or TaskName(t).key_bucket != b or TaskName(t).factor != FACTOR
        )
        took = time.perf_counter() - start
        assert not any(counts.values()), counts
        print(f"spark SQL checks ({master})  {took:8.2f} s  {len(rows) / took:12,.0f} rows/s  {counts}")
        return {"spark_s": round(took, 3), "spark_rows_per_s": round(len(rows) / took)}
    finally:
        spark.stop()


def main() -> None:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--spark", action="store_true", help="also run the Spark SQL path")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    start = time.perf_counter()
    expected, rows, dead = synthetic_window(args.rows, partitions=4, factor=FACTOR, keys=args.keys)
    print(
        f"synthetic sink: {len(rows):,} rows, {args.keys:,} keys, factor {FACTOR}, "
        f"made in {time.perf_counter() - start:.2f} s"
    )
    with tempfile.TemporaryDirectory() as tmp:
        figures = bench_pandas(expected, rows, dead, Path(tmp) / "quality")
        if args.spark:
            figures |= bench_spark(expected, rows, Path(tmp), args.master)
    print(json.dumps({"bench": "quality", "figures": {"rows": len(rows), **figures}}))


if __name__ == "__main__":
    main()
