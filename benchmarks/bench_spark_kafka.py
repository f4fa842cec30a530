"""This platform against Spark's own Kafka source, on one real Kafka broker, the same data, in one run.

    python -m benchmarks.bench_spark_kafka [--slow-records 96000] [--cheap-records 500000] [--keys 2000]
                                           [--latency-ms 2] [--max-records 8000] [--cheap-max-records 100000]

What a Spark user would pick instead of us is ``spark.readStream.format("kafka")``: it reaches more
parallelism than the topic has partitions with ``minPartitions``, which cuts each partition's offset range
into contiguous pieces read by separate tasks, so records of one key run concurrently and out of order. We
reach it with key buckets (virtual tasks), so a key's records stay in one task, in order.

The broker is a real Apache Kafka broker (one KRaft node on 127.0.0.1, ``pipelines.servers.kafka_broker``).
Its topics have 2 partitions; the records are keyed JSON events over ``--keys`` keys with a per-key ``seq``
(``{"key": "key-3", "seq": 17, ...}``), placed by the key's hash as a Java producer places them. Two jobs,
both running the same per-record function (``benchmarks.bench_runtime:process``: the demo enrichment, which
sleeps ``--latency-ms`` per record as a remote call would, plus the time it ran):

* the **2 ms/record job** on ``--slow-records`` records: Spark's Kafka source with ``minPartitions`` 1 and
  8 against this platform at elasticity factor 1 and 8; factor 8 runs 16 virtual tasks (8 per partition) where
  ``minPartitions`` 8 runs 8 Spark tasks, so Spark runs once more with ``minPartitions`` 16, the same count;
* a **cheap job** (no sleep) on ``--cheap-records`` records: Spark's source at ``minPartitions`` 1 against
  this platform at factor 1, i.e. what the elastic machinery costs where no parallelism is needed.

Spark's side: ``readStream.format("kafka")`` (``startingOffsets`` earliest, ``Trigger.AvailableNow``, no
``maxOffsetsPerTrigger``, so one micro-batch), ``mapInArrow`` running the per-record function row by row
(the Arrow form of ``mapInPandas``, the same batches our runtime hands its Python workers), into Spark's
parquet file sink. Ours: a job of ``include/jobs/enrichment.yaml`` run available-now (``run_job``) into its
Delta sink, ``--max-records`` per micro-batch at factor 1 (times the factor above it; ``--cheap-max-records``
for the cheap job). Each figure is wall time from query start to its end, in one SparkSession
(``local[16]``: every task of the widest run in flight at once), each right after an unmeasured warm-up of the
same reader at the same width on a small topic.

Order violations are counted the same way for both: each key's records sorted by the time the per-record
function ran (``processed_ns``), counting places where ``seq`` goes down. Every run is also checked for lost
and duplicated records (a run with any fails the benchmark).

Spark's Kafka source (``org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0``) is on the class path of every
session the platform builds (``jvm/spark/pom.xml``), so this benchmark's one session runs both readers.

Ends with one JSON line ``{"bench": "spark_kafka", "figures": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.bench_kafka import records
from benchmarks.bench_runtime import OUTPUT_SCHEMA, Run, check, cpu_since, cpu_snapshot, table
from pipelines.usage import Parser

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 2
SLOTS = PARTITIONS * 8
WARMUP_RECORDS = 2000
_START = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ Spark's Kafka source


def per_record(topic: str, latency_ms: float) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow function: the benchmark's per-record function over the rows Spark's Kafka source gives."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from benchmarks.bench_runtime import process as fn
        from pipelines.jobs.process import Record, TaskContext
        from pipelines.runtime.processing import column_values

        ctx = TaskContext("spark-kafka", 0, "spark", {"latency_ms": latency_ms})
        schema = pa.schema(
            [
                ("partition", pa.int32()),
                ("offset", pa.string()),
                ("event_key", pa.string()),
                ("seq", pa.int64()),
                ("processed_ns", pa.int64()),
            ]
        )
        for batch in batches:
            cols = {c: batch.column(c).to_pylist() for c in ("partition", "offset", "key", "value")}
            stamps = column_values(batch.column("timestamp"))
            out: dict[str, list[Any]] = {name: [] for name in schema.names}
            for i in range(batch.num_rows):
                offset = str(cols["offset"][i])
                record = Record(topic, cols["partition"][i], offset, cols["key"][i], cols["value"][i], stamps[i], None)
                row = fn(record, ctx)
                out["partition"].append(cols["partition"][i])
                out["offset"].append(offset)
                out["event_key"].append(row["event_key"])
                out["seq"].append(row["seq"])
                out["processed_ns"].append(row["processed_ns"])
            yield pa.RecordBatch.from_pydict(out, schema=schema)

    return run


def run_spark(
    spark: Any,
    bootstrap: str,
    topic: str,
    min_partitions: int,
    latency_ms: float,
    produced: int,
    work: Path,
    tag: str = "",
) -> Run:
    """Spark's Kafka source, available-now, the per-record function in mapInArrow, into a parquet sink."""
    import pyarrow.parquet as pq

    name = f"spark-{topic}-min{min_partitions}{tag}"
    out, checkpoint = work / name, work / f"{name}.checkpoint"
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minPartitions", str(min_partitions))
        .load()
    )
    result = source.select("partition", "offset", "key", "value", "timestamp").mapInArrow(
        per_record(topic, latency_ms),
        "partition INT, offset STRING, event_key STRING, seq BIGINT, processed_ns BIGINT",
    )
    c0, t0 = cpu_snapshot(), time.perf_counter()
    query = (
        result.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    if query.exception() is not None:
        raise SystemExit(f"{name} failed: {query.exception()}")
    run = Run(f"spark minPartitions={min_partitions}", min_partitions, 0, produced, seconds, cpu_s=cpu_since(c0))
    frame = pq.read_table(str(out)).to_pandas()
    check(run, frame, ["processed_ns"])
    run.tasks = max(min_partitions, PARTITIONS)  # Spark cuts each partition's range until there are that many
    run.batches = 1
    return run


# ------------------------------------------------------------------ this platform


def run_ours(
    spark: Any,
    home: Any,
    settings: dict[str, Any],
    topic: str,
    factor: int,
    latency_ms: float,
    max_records: int,
    produced: int,
    tag: str = "",
) -> Run:
    import deltalake

    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job
    from pipelines.runtime.driver import run_job

    name = f"ours_{topic}_f{factor}{tag}"
    base = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml")
    config = JobConfig.from_dict(
        {
            **base.to_dict(),
            "name": name,
            "inputs": [{"system": "kafka", "stream": topic}],
            "systems": {"kafka": settings},
            "elasticity_factor": factor,
            "process": "benchmarks.bench_runtime:process",
            "output_schema": OUTPUT_SCHEMA,
            "process_options": {"latency_ms": latency_ms},
            "batch": {"max_records": max_records, "trigger_interval": "0 seconds"},
            "trigger": "available-now",
            "sink": {"table": name},
            "dead_letter": {"table": f"{name}_dead"},
        }
    )
    model = create_job(home, config)
    c0, t0 = cpu_snapshot(), time.perf_counter()
    run_job(spark, home, name, available_now=True, progress=lambda m: None)
    seconds = time.perf_counter() - t0
    run = Run(f"ours factor {factor}", factor, model.task_count, produced, seconds, cpu_s=cpu_since(c0))
    frame = deltalake.DeltaTable(str(home.sinks / name)).to_pandas()
    check(run, frame, ["batch_id", "task_seq"])
    run.batches = int(frame["batch_id"].nunique()) if len(frame) else 0
    return run


# ------------------------------------------------------------------ report


def verdict(run: Run) -> None:
    where = f"{run.mode} ({run.produced:,} records)"
    if run.lost or run.duplicated or run.rows != run.produced:
        raise SystemExit(f"DATA-QUALITY FAILURE: {where}: {run.rows} rows, {run.lost} lost, {run.duplicated} dup")
    log(
        f"{where}: {run.seconds:.1f}s = {run.rate:,.0f} records/s, {run.violations_clock:,} order violations "
        f"({run.keys_hit if run.mode.startswith('spark') else 0} keys), {run.batches} batches"
    )


def report(slow: dict[str, Run], cheap: dict[str, Run], latency_ms: float) -> None:
    header = ["job", "reader", "tasks", "records", "seconds", "records/s", "order violations", "keys hit", "CPU s"]
    rows = []
    for job, runs in ((f"{latency_ms:g} ms/record", slow), ("cheap", cheap)):
        for run in runs.values():
            rows.append(
                [
                    job,
                    run.mode,
                    str(run.tasks),
                    f"{run.produced:,}",
                    f"{run.seconds:.1f}",
                    f"{run.rate:,.0f}",
                    f"{run.violations_clock:,}",
                    str(run.keys_hit),
                    f"{run.cpu_s:.1f}",
                ]
            )
    print(table(rows, header))
    print(
        "\n# order violations: per key, records sorted by when the per-record function ran (the same clock for"
        "\n# both), places where seq goes down; keys hit: keys with at least one (for ours, by processing order)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow-records", type=int, default=96_000, help="records for the 2 ms/record job")
    parser.add_argument("--cheap-records", type=int, default=500_000, help="records for the cheap job")
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--max-records", type=int, default=8000, help="our micro-batch at factor 1, slow job")
    parser.add_argument("--cheap-max-records", type=int, default=100_000, help="our micro-batch, cheap job")
    args = parser.parse_args(argv)

    from pipelines.runtime.session import build_session
    from pipelines.servers.kafka_broker import KafkaBroker
    from pipelines.storage.home import Home
    from pipelines.systems.kafka import KafkaSystem

    root = Path(tempfile.mkdtemp(prefix="bench-spark-kafka-"))
    home = Home(root / "home")
    broker = KafkaBroker(partitions=PARTITIONS)
    kafka: KafkaSystem | None = None
    try:
        broker.start()
        log(f"Kafka broker on {broker.bootstrap} (started in {broker.started_in_s:.1f}s)")
        settings = {"bootstrap_servers": broker.bootstrap}
        kafka = KafkaSystem(settings)
        inputs = (("slow", args.slow_records, 1), ("cheap", args.cheap_records, 2), ("warmup", WARMUP_RECORDS, 3))
        for topic, n, seed in inputs:
            broker.create_topic(topic, PARTITIONS)
            batch = records(n, args.keys, seed)
            for i in range(0, n, 20_000):
                kafka.produce(topic, batch[i : i + 20_000])
            log(f"produced {n:,} records over {args.keys:,} keys into topic {topic!r} ({PARTITIONS} partitions)")

        spark = build_session(f"local[{SLOTS}]", app_name="bench-spark-kafka")
        try:
            slow: dict[str, Run] = {}
            cheap: dict[str, Run] = {}

            def measure(
                reader: str, topic: str, width: int, latency_ms: float, records: int, batch: int, tag: str
            ) -> Run:
                if reader == "spark":
                    return run_spark(spark, broker.bootstrap, topic, width, latency_ms, records, root, tag=tag)
                return run_ours(spark, home, settings, topic, width, latency_ms, batch, records, tag=tag)

            slow_n, cheap_n, latency = args.slow_records, args.cheap_records, args.latency_ms
            plan = [  # (results, key, reader, topic, minPartitions or factor, latency, records, our batch)
                (slow, "spark_min1", "spark", "slow", 1, latency, slow_n, 0),
                (slow, "ours_f1", "ours", "slow", 1, latency, slow_n, args.max_records),
                (slow, "spark_min8", "spark", "slow", 8, latency, slow_n, 0),
                (slow, "ours_f8", "ours", "slow", 8, latency, slow_n, args.max_records),
                (slow, "spark_min16", "spark", "slow", 16, latency, slow_n, 0),
                (cheap, "spark_min1", "spark", "cheap", 1, 0.0, cheap_n, 0),
                (cheap, "ours_f1", "ours", "cheap", 1, 0.0, cheap_n, args.cheap_max_records),
            ]
            for i, (runs, key, reader, topic, width, latency_ms, records_n, batch) in enumerate(plan):
                # Right before each timed run, the same reader at the same width on a small topic: Python workers
                # started (Spark ends those idle for a minute) and the code paths warm; not measured.
                measure(reader, "warmup", width, 0.0, WARMUP_RECORDS, 400, tag=f"_warm{i}")
                runs[key] = measure(reader, topic, width, latency_ms, records_n, batch, tag="")
                verdict(runs[key])
        finally:
            spark.stop()
        report(slow, cheap, args.latency_ms)
        figures = {
            "ours_f8_vs_spark_min8": slow["ours_f8"].rate / slow["spark_min8"].rate,
            "spark_min8_order_violations": float(slow["spark_min8"].violations_clock),
            "ours_f8_order_violations": float(slow["ours_f8"].violations_clock),
            "ours_f1_vs_spark_min1_cheap": cheap["ours_f1"].rate / cheap["spark_min1"].rate,
            "ours_f1_vs_spark_min1": slow["ours_f1"].rate / slow["spark_min1"].rate,
            "spark_min8_vs_min1": slow["spark_min8"].rate / slow["spark_min1"].rate,
            "ours_f8_vs_f1": slow["ours_f8"].rate / slow["ours_f1"].rate,
            "spark_min1_order_violations": float(slow["spark_min1"].violations_clock),
            "spark_min8_keys_hit": float(slow["spark_min8"].keys_hit),
            "ours_f8_vs_spark_min16": slow["ours_f8"].rate / slow["spark_min16"].rate,
            "spark_min16_order_violations": float(slow["spark_min16"].violations_clock),
            "ours_f8_rps": slow["ours_f8"].rate,
            "spark_min8_rps": slow["spark_min8"].rate,
            "ours_f1_cheap_rps": cheap["ours_f1"].rate,
            "spark_min1_cheap_rps": cheap["spark_min1"].rate,
        }
        print(json.dumps({"bench": "spark_kafka", "figures": {k: round(v, 3) for k, v in figures.items()}}))
        return 0
    finally:
        if kafka is not None:
            kafka.close()
        broker.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
