"""This platform against Spark's own Kafka source, on one real Kafka broker, the same data, in one run.

    python -m benchmarks.bench_spark_kafka [--slow-records 96000] [--cheap-records 500000] [--keys 2000]
                                           [--latency-ms 2] [--max-records 8000] [--cheap-max-records 100000]
                                           [--live-rate 1500] [--live-s 25]

What a Spark user would pick instead of us is ``spark.readStream.format("kafka")``: it reaches more
parallelism than the topic has partitions with ``minPartitions``, which cuts each partition's offset range
into contiguous pieces read by separate tasks, so records of one key run concurrently and out of order. We
reach it with key buckets (virtual tasks), so a key's records stay in one task, in order.

The broker is a real Apache Kafka broker (one KRaft node on 127.0.0.1, ``testbed.servers.kafka_broker``).
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

The **order-keeping Spark baseline** is what a Spark engineer who needs per-key order writes: the same
source, ``repartition(N, "key")`` then ``sortWithinPartitions("partition", "offset")`` before the per-record
function, so each key runs in one task in offset order, at the cost of a shuffle; run at N = 8 and 16 (the task
counts of our factor 4 and 8). They change N by restarting the query: a **live** part measures that restart (a
query at N = 8 on a topic a producer keeps writing into, stopped between batches and started again at N = 16 on
the same checkpoint) against our in-place switch of a live job from factor 4 to 8 (16 virtual tasks) on the same
topic; downtime for both is from the old query's stop (Spark's: the end of its last completed batch, when
``stop`` cancelled one) to the new query's first batch with data.

Each run's CPU is that of the whole process tree (the JVM, Python daemons and workers) and its peak memory the
largest resident set the tree held, sampled every 0.25 s (``bench_runtime.PeakRss``).

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
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.bench_kafka import records
from benchmarks.bench_runtime import OUTPUT_SCHEMA, PeakRss, Run, check, cpu_since, cpu_snapshot, table
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
    shuffle: int = 0,
) -> Run:
    """Spark's Kafka source, available-now, the per-record function in mapInArrow, into a parquet sink.

    ``shuffle`` N > 0: the order-keeping form, each key's records shuffled to one of N tasks and sorted there
    by partition and offset (``min_partitions`` is then 1: the shuffle, not the read, sets the parallelism).
    """
    import pyarrow.parquet as pq

    name = f"spark-{topic}-{'shuffle' if shuffle else 'min'}{shuffle or min_partitions}{tag}"
    out, checkpoint = work / name, work / f"{name}.checkpoint"
    c0, t0 = cpu_snapshot(), time.perf_counter()
    with PeakRss() as memory:
        query = start_query(
            spark,
            bootstrap,
            topic,
            latency_ms,
            out,
            checkpoint,
            {"availableNow": True},
            min_partitions=min_partitions,
            shuffle=shuffle,
        )
        query.awaitTermination()
        seconds = time.perf_counter() - t0
    if query.exception() is not None:
        raise SystemExit(f"{name} failed: {query.exception()}")
    mode = f"spark key shuffle N={shuffle}" if shuffle else f"spark minPartitions={min_partitions}"
    run = Run(mode, min_partitions, 0, produced, seconds, cpu_s=cpu_since(c0), peak_rss_mib=memory.peak_mib)
    frame = pq.read_table(str(out)).to_pandas()
    check(run, frame, ["processed_ns"])
    run.tasks = shuffle or max(min_partitions, PARTITIONS)  # Spark cuts each partition's range to that many
    run.batches = 1
    return run


OUT_SCHEMA = "partition INT, offset STRING, event_key STRING, seq BIGINT, processed_ns BIGINT"


def start_query(
    spark: Any,
    bootstrap: str,
    topic: str,
    latency_ms: float,
    out: Path,
    checkpoint: Path,
    trigger: dict[str, Any],
    *,
    min_partitions: int = 1,
    shuffle: int = 0,
    max_per_batch: int = 0,
) -> Any:
    """A streaming query of the per-record function over ``topic`` from its start, its rows into parquet at ``out``.

    With ``shuffle`` N: a streaming DataFrame cannot be sorted, so the order-keeping form is what Spark's
    documentation points to, ``foreachBatch``: each micro-batch shuffled by key into N tasks, sorted within
    them by partition and offset, through the same function, appended as parquet.
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minPartitions", str(min_partitions))
    )
    if max_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_batch))
    rows = reader.load().select("partition", "offset", "key", "value", "timestamp")
    fn = per_record(topic, latency_ms)
    if not shuffle:
        writer = rows.mapInArrow(fn, OUT_SCHEMA).writeStream.format("parquet").option("path", str(out))
    else:

        def write(batch: Any, batch_id: int) -> None:
            keyed = batch.repartition(shuffle, "key").sortWithinPartitions("partition", "offset")
            keyed.mapInArrow(fn, OUT_SCHEMA).write.mode("append").parquet(str(out))

        writer = rows.writeStream.foreachBatch(write)
    return writer.option("checkpointLocation", str(checkpoint)).trigger(**trigger).start()


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

    from pipelines.operations.jobs import create_job
    from pipelines.runtime.driver import run_job

    name = f"ours_{topic}_f{factor}{tag}"
    config = job_config(name, topic, settings, factor, latency_ms, max_records, "available-now")
    model = create_job(home, config)
    c0, t0 = cpu_snapshot(), time.perf_counter()
    with PeakRss() as memory:
        run_job(spark, home, name, available_now=True, progress=lambda m: None)
        seconds = time.perf_counter() - t0
    cpu = cpu_since(c0)
    run = Run(f"ours factor {factor}", factor, model.task_count, produced, seconds, cpu_s=cpu)
    run.peak_rss_mib = memory.peak_mib
    frame = deltalake.DeltaTable(str(home.sinks / name)).to_pandas()
    check(run, frame, ["batch_id", "task_seq"])
    run.batches = int(frame["batch_id"].nunique()) if len(frame) else 0
    return run


def job_config(
    name: str, topic: str, settings: dict[str, Any], factor: int, latency_ms: float, max_records: int, trigger: str
) -> Any:
    """The benchmark's job: the demo enrichment's config over ``topic``, the per-record function of the runs."""
    from pipelines.jobs.config import JobConfig

    base = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml")
    return JobConfig.from_dict(
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
            "trigger": trigger,
            "sink": {"table": name},
            "dead_letter": {"table": f"{name}_dead"},
        }
    )


# ------------------------------------------------------------------ a live change of parallelism


class LiveProducer:
    """Writes ``records`` into ``topic`` at ``rate`` per second in a thread, as a service keeps producing."""

    def __init__(self, kafka: Any, topic: str, records: list[Any], rate: int) -> None:
        self.kafka, self.topic, self.records, self.rate = kafka, topic, records, rate
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LiveProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set() and self.sent < len(self.records):
            due = min(len(self.records), int((time.monotonic() - started) * self.rate))
            if due > self.sent:
                self.kafka.produce(self.topic, self.records[self.sent : due])
                self.sent = due
            self._stop.wait(0.05)


def _progress_started(progress: dict[str, Any]) -> float:
    """A micro-batch's start as epoch seconds (Spark's progress ``timestamp``, UTC, ISO 8601)."""
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def _batches_with_data(query: Any) -> list[dict[str, Any]]:
    return [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]


def _wait(done: Callable[[], bool], what: str, timeout: float = 180.0, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every_s)


def spark_restart(
    spark: Any, bootstrap: str, topic: str, before: int, after: int, latency_ms: float, live_s: float, work: Path
) -> dict[str, float]:
    """A live key-shuffled query at N = ``before`` stopped between two batches and started again at ``after``.

    What a Spark engineer does to change N: the same checkpoint (a shuffle is stateless, so N may change), a
    new query. Downtime as ours is measured: from the old query's stop (or the end of its last completed batch,
    if ``stop`` cancelled one that had started) to the start of the new query's first batch with data (Spark's
    own progress timestamp, the earliest moment that can be known).
    """
    import pyarrow.parquet as pq

    out, checkpoint = work / f"spark-{topic}", work / f"spark-{topic}.checkpoint"

    def start(tasks: int) -> Any:
        trigger = {"processingTime": "1 second"}  # a gap between batches to stop in; the next starts at once
        return start_query(
            spark, bootstrap, topic, latency_ms, out, checkpoint, trigger, shuffle=tasks, max_per_batch=2000
        )

    old = start(before)
    _wait(lambda: len(_batches_with_data(old)) >= 3, f"3 batches at N={before}")
    time.sleep(live_s / 2)
    _wait(lambda: not old.status["isTriggerActive"], "a batch boundary", timeout=60, every_s=0.005)  # as ours
    asked = time.time()
    old.stop()  # a batch that started meanwhile is cancelled, and done again by the new query
    stopped = time.time()
    # The end of the old query's last completed batch: work a cancelled batch did is lost time too.
    last_done = max(_progress_started(p) + p["durationMs"]["triggerExecution"] / 1000 for p in old.recentProgress)
    new = start(after)
    _wait(lambda: bool(_batches_with_data(new)), f"the first batch with data at N={after}")
    first = _progress_started(_batches_with_data(new)[0])
    time.sleep(live_s / 2)
    new.stop()
    frame = pq.read_table(str(out)).to_pandas()
    drops = frame.sort_values("processed_ns").groupby("event_key", sort=False)["seq"].diff() < 0
    duplicated = int(frame.duplicated(["partition", "offset"]).sum())
    downtime = first - min(last_done, stopped)
    log(
        f"spark key shuffle N={before} -> N={after} by restart: downtime {downtime:.2f}s (stop took "
        f"{stopped - asked:.2f}s, last batch done {stopped - last_done:.2f}s before it returned), "
        f"{len(frame):,} records, {duplicated} duplicated, {int(drops.sum())} order violations"
    )
    if duplicated:
        raise SystemExit(f"DATA-QUALITY FAILURE: the restarted Spark query wrote {duplicated} records twice")
    return {"downtime_s": downtime, "violations": float(drops.sum()), "records": float(len(frame))}


def ours_switch(
    spark: Any,
    home: Any,
    settings: dict[str, Any],
    topic: str,
    before: int,
    after: int,
    latency_ms: float,
    live_s: float,
) -> dict[str, float]:
    """A live job of ours at factor ``before`` switched in place to ``after``, on the topic Spark just read."""
    import deltalake

    from pipelines.control import ControlPlane
    from pipelines.operations import scaling
    from pipelines.operations.jobs import create_job
    from pipelines.runtime import requests
    from pipelines.runtime.driver import run_job

    name = f"ours_{topic}"
    create_job(home, job_config(name, topic, settings, before, latency_ms, 2000 // before, "continuous"))
    control = ControlPlane(home)
    failed: list[BaseException] = []

    def drive() -> None:
        try:
            run_job(spark, home, name, available_now=False, progress=lambda m: None)
        except BaseException as e:  # said by the main thread
            failed.append(e)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        _wait(lambda: bool(failed) or (control.checkpoints.latest_batch(name, 1) or 0) >= 3, "3 batches at v1")
        time.sleep(live_s / 2)
        result = scaling.run_all(home, scaling.ScalingRequest(name, after, "bench: in place"), say=lambda m: None)
        time.sleep(live_s / 2)
    finally:
        requests.ask_stop(home, name)
        driver.join(180)
    if failed:
        raise SystemExit(f"our live job failed: {failed[0]}")
    frame = deltalake.DeltaTable(str(home.sinks / name)).to_pandas()
    drops = frame.sort_values("processed_ns").groupby("event_key", sort=False)["seq"].diff() < 0  # as Spark's
    log(
        f"ours factor {before} -> {after} in place: downtime {result['downtime_s']:.2f}s, {len(frame):,} records, "
        f"status {result['status']}, {int(drops.sum())} order violations"
    )
    if result["status"] != "verified":
        raise SystemExit(f"our in-place switch ended {result['status']}: {result}")
    return {"downtime_s": float(result["downtime_s"]), "violations": float(drops.sum()), "records": float(len(frame))}


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
    header = [
        "job",
        "reader",
        "tasks",
        "records",
        "seconds",
        "records/s",
        "order violations",
        "keys hit",
        "CPU s",
        "CPU us/record",
        "peak MiB",
    ]
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
                    f"{run.cpu_s / run.produced * 1e6:,.0f}",
                    f"{run.peak_rss_mib:,.0f}",
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
    parser.add_argument("--live-rate", type=int, default=1500, help="records/s produced while parallelism changes")
    parser.add_argument("--live-s", type=float, default=20.0, help="seconds each live query runs around its change")
    args = parser.parse_args(argv)

    from pipelines.runtime.session import build_session
    from pipelines.storage.home import Home
    from pipelines.systems.kafka import KafkaSystem
    from testbed.servers.kafka_broker import KafkaBroker

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
                if reader == "spark_shuffle":
                    return run_spark(spark, broker.bootstrap, topic, 1, latency_ms, records, root, tag, shuffle=width)
                return run_ours(spark, home, settings, topic, width, latency_ms, batch, records, tag=tag)

            slow_n, cheap_n, latency = args.slow_records, args.cheap_records, args.latency_ms
            plan = [  # (results, key, reader, topic, minPartitions or factor, latency, records, our batch)
                (slow, "spark_min1", "spark", "slow", 1, latency, slow_n, 0),
                (slow, "ours_f1", "ours", "slow", 1, latency, slow_n, args.max_records),
                (slow, "spark_min8", "spark", "slow", 8, latency, slow_n, 0),
                (slow, "ours_f8", "ours", "slow", 8, latency, slow_n, args.max_records),
                (slow, "spark_min16", "spark", "slow", 16, latency, slow_n, 0),
                (slow, "spark_shuffle8", "spark_shuffle", "slow", 8, latency, slow_n, 0),
                (slow, "spark_shuffle16", "spark_shuffle", "slow", 16, latency, slow_n, 0),
                (cheap, "spark_min1", "spark", "cheap", 1, 0.0, cheap_n, 0),
                (cheap, "ours_f1", "ours", "cheap", 1, 0.0, cheap_n, args.cheap_max_records),
            ]
            for i, (runs, key, reader, topic, width, latency_ms, records_n, batch) in enumerate(plan):
                # Right before each timed run, the same reader at the same width on a small topic: Python workers
                # started (Spark ends those idle for a minute) and the code paths warm; not measured.
                measure(reader, "warmup", width, 0.0, WARMUP_RECORDS, 400, tag=f"_warm{i}")
                runs[key] = measure(reader, topic, width, latency_ms, records_n, batch, tag="")
                verdict(runs[key])
            # The change of parallelism on a live input: Spark's restart at another N, our switch in place.
            live_n = int(args.live_rate * (args.live_s + 120))  # more than either section can read
            live = records(live_n, args.keys, 4)
            switches: dict[str, dict[str, float]] = {}
            for reader in ("spark", "ours"):
                topic = f"live_{reader}"
                broker.create_topic(topic, PARTITIONS)
                log(f"{reader}: a live query on {topic!r}, {args.live_rate:,} records/s produced into it")
                with LiveProducer(kafka, topic, live, args.live_rate):
                    if reader == "spark":
                        switches[reader] = spark_restart(
                            spark, broker.bootstrap, topic, 8, 16, latency, args.live_s, root
                        )
                    else:
                        switches[reader] = ours_switch(spark, home, settings, topic, 4, 8, latency, args.live_s)
        finally:
            spark.stop()
        report(slow, cheap, args.latency_ms)
        print(
            table(
                [
                    [
                        "spark key shuffle: restart N=8 -> 16",
                        f"{switches['spark']['downtime_s']:.2f}",
                        f"{switches['spark']['violations']:.0f}",
                    ],
                    [
                        "ours: in-place switch factor 4 -> 8",
                        f"{switches['ours']['downtime_s']:.2f}",
                        f"{switches['ours']['violations']:.0f}",
                    ],
                ],
                ["8 -> 16 tasks on a live topic", "downtime s", "order violations"],
            )
        )
        f8, spark16, shuffle16 = slow["ours_f8"], slow["spark_min16"], slow["spark_shuffle16"]
        figures = {
            "ours_f8_vs_spark_shuffle16": f8.rate / shuffle16.rate,
            "ours_f8_vs_spark_shuffle8": f8.rate / slow["spark_shuffle8"].rate,
            "spark_shuffle16_vs_min16": shuffle16.rate / spark16.rate,
            "spark_shuffle16_order_violations": float(shuffle16.violations_clock),
            "spark_shuffle8_order_violations": float(slow["spark_shuffle8"].violations_clock),
            "ours_f8_cpu_per_record_vs_spark_min16": (f8.cpu_s / f8.produced) / (spark16.cpu_s / spark16.produced),
            "ours_f8_cpu_per_record_vs_spark_shuffle16": (f8.cpu_s / f8.produced)
            / (shuffle16.cpu_s / shuffle16.produced),
            "ours_f8_peak_mib_vs_spark_min16": f8.peak_rss_mib / spark16.peak_rss_mib,
            "ours_f8_peak_mib": f8.peak_rss_mib,
            "spark_min16_peak_mib": spark16.peak_rss_mib,
            "spark_restart_8_to_16_downtime_s": switches["spark"]["downtime_s"],
            "ours_switch_4_to_8_downtime_s": switches["ours"]["downtime_s"],
            "ours_switch_vs_spark_restart_downtime": switches["ours"]["downtime_s"] / switches["spark"]["downtime_s"],
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
