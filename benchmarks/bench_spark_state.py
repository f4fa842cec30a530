"""A per-key fold as keyed state: this platform against Spark's own stateful operator, on one Kafka broker, one run.

    python -m benchmarks.bench_spark_state [--records 40000] [--keys 20000] [--latency-ms 2] [--factor 8]
                                           [--partitions-spark 16]

The fold is the example job's (``include/jobs/customer-totals.yaml``): per customer, the count of its events, the sum
of their amounts and the last ``seq`` seen, after a simulated remote call of ``--latency-ms`` per record (run once
more with none: the cheap fold). The input is one topic of 2 partitions on a real Apache Kafka broker (one KRaft
node on 127.0.0.1, ``testbed.servers.kafka_broker``), keyed JSON events over ``--keys`` keys.

* **Spark**, as a Spark user writes it: ``readStream.format("kafka")`` -> ``groupBy(key)`` ->
  ``transformWithStateInPandas`` (a ``StatefulProcessor`` with a ``ValueState`` per key) with the RocksDB state
  store and ``spark.sql.shuffle.partitions`` = ``--partitions-spark``, into a parquet sink, available-now.
* **Ours**: the example job on the same topic at factor ``--factor`` (2 partitions x factor virtual tasks),
  available-now, into its Delta sink, its state in Delta.

Figures, each run in this process's one SparkSession after a warm-up: records/s and the ratio of ours to Spark's;
the CPU seconds of the whole process tree (the JVM and every Python worker; the broker's, serving both, too) and
its peak memory (proportional set size, the broker left out); the state's
bytes on disk (Spark's RocksDB files under the checkpoint against our two Delta tables). Then the rescale, the way
each offers it:

* **Spark**: stop the query, set ``spark.sql.shuffle.partitions`` to twice as many, start it again on its
  checkpoint with new records waiting. The state partitions stay what the first batch pinned (the offset log's
  conf, and the state store's partition folders, are counted), and Spark says so only in its log ("Updating the
  value of conf ..."). Its restart is timed from the old query's end to the new query's first batch done.
* **Ours**: a live driver on the job, rescaled in place to twice its factor while records arrive; its downtime is
  the drivers' own metric (old query stopped -> new query's first batch with data), and the new factor is in force.

Both must hold every key's fold exactly (checked against the records produced) before any figure is printed.
Ends with one JSON line ``{"bench": "spark_state", "figures": {...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from benchmarks.bench_runtime import cpu_since, cpu_snapshot, table
from pipelines.usage import Parser

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 2
_START = time.monotonic()
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def log(message: str) -> None:
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def events(n: int, keys: int, seed: int, seqs: dict[str, int]) -> list[tuple[bytes, bytes, None]]:
    """``n`` events over ``keys`` keys, each key's seq going on from ``seqs`` (updated)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        key = f"key-{rng.randrange(keys)}"
        seq = seqs.get(key, 0)
        seqs[key] = seq + 1
        value = {"key": key, "seq": seq, "amount": rng.randrange(1, 1000)}
        out.append((key.encode(), json.dumps(value, separators=(",", ":")).encode(), None))
    return out


def folds(records: list[tuple[bytes, bytes, None]]) -> dict[str, tuple[int, int, int]]:
    """Each key's expected fold: (events, sum of amounts, last seq)."""
    out: dict[str, list[int]] = {}
    for key, value, _ in records:
        event = json.loads(value)
        fold = out.setdefault(key.decode(), [0, 0, -1])
        fold[0] += 1
        fold[1] += event["amount"]
        fold[2] = max(fold[2], event["seq"])
    return {k: (a, b, c) for k, (a, b, c) in out.items()}


class Peak(threading.Thread):
    """The peak memory of this process and its descendants but ``exclude`` (the broker), sampled every 0.2 s.

    Proportional set size, not resident: Spark's Python workers fork from one daemon and share its pages, and a
    sum of their RSS counted those pages once per worker (10 GiB "peak" for a run whose machine never held it).
    """

    def __init__(self, exclude: set[int]) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.exclude = exclude
        self.halt = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.halt.wait(0.2):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    if p.pid in self.exclude or self.exclude & {a.pid for a in p.parents()}:
                        continue
                    total += p.memory_full_info().pss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)


# ------------------------------------------------------------------ Spark's stateful operator


def processor(latency_ms: float) -> Any:
    """A ``StatefulProcessor`` folding each key's events into a ``ValueState``, one record at a time."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Fold(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.state = handle.getValueState("totals", "events BIGINT, amount BIGINT, last_seq BIGINT")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            import pandas as pd

            events, amount, last = self.state.get() if self.state.exists() else (0, 0, -1)
            out = []
            for frame in rows:
                for value, seq in zip(frame["amount"], frame["seq"], strict=True):
                    if latency_ms:
                        time.sleep(latency_ms / 1000.0)  # the same remote call as ours, per record
                    events, amount, last = events + 1, amount + int(value), max(last, int(seq))
                    out.append((key[0], int(seq), events, amount, last))
            self.state.update((events, amount, last))
            yield pd.DataFrame(out, columns=["customer", "seq", "events", "amount", "last_seq"])

        def close(self) -> None:
            pass

    return Fold()


def spark_query(spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path, latency_ms: float) -> Any:
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS key",
            "CAST(get_json_object(CAST(value AS STRING), '$.seq') AS BIGINT) AS seq",
            "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount",
        )
    )
    folded = source.groupBy("key").transformWithStateInPandas(
        statefulProcessor=processor(latency_ms),
        outputStructType="customer STRING, seq BIGINT, events BIGINT, amount BIGINT, last_seq BIGINT",
        outputMode="Update",
        timeMode="None",
    )
    return (
        folded.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def spark_folds(spark: Any, out: Path) -> dict[str, tuple[int, int, int]]:
    """Each key's newest output row (its events are its fold's count)."""
    rows = spark.read.parquet(str(out)).selectExpr("customer", "events", "amount", "last_seq").collect()
    best: dict[str, tuple[int, int, int]] = {}
    for r in rows:
        if r["customer"] not in best or r["events"] > best[r["customer"]][0]:
            best[r["customer"]] = (int(r["events"]), int(r["amount"]), int(r["last_seq"]))
    return best


def state_partitions(checkpoint: Path) -> int:
    """The state store's partitions: its folders under ``state/<operator>``."""
    operator = checkpoint / "state" / "0"
    return len([p for p in operator.iterdir() if p.is_dir() and p.name.isdigit()]) if operator.is_dir() else 0


def pinned_partitions(checkpoint: Path) -> int | None:
    """``spark.sql.shuffle.partitions`` as the newest offset-log entry carries it (what Spark restores)."""
    logs = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    if not logs:
        return None
    meta = json.loads(logs[-1].read_text().splitlines()[1])
    value = meta.get("conf", {}).get("spark.sql.shuffle.partitions")
    return None if value is None else int(value)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


# ------------------------------------------------------------------ ours


def our_job(home: Any, settings: dict[str, Any], topic: str, name: str, factor: int, latency_ms: float) -> Any:
    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job

    raw = JobConfig.load(REPO / "include" / "jobs" / "customer-totals.yaml").to_dict()
    raw.update(
        name=name,
        inputs=[{"system": "kafka", "stream": topic}],
        systems={"kafka": settings},
        elasticity_factor=factor,
        process_options={"latency_ms": latency_ms},
        batch={"max_records": 4000, "trigger_interval": "0 seconds"},
        sink={"table": name},
        dead_letter={"table": f"{name}_dead"},
    )
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    return config


def our_folds(home: Any, config: Any) -> dict[str, tuple[int, int, int]]:
    from pipelines.state.inspect import state_at

    rows = state_at(home, config.name, config.state[0], None).to_pylist()
    return {r["key"].decode(): (r["events"], r["amount"], r["last_seq"]) for r in rows}


def measured(what: str, run: Any, exclude: set[int]) -> dict[str, float]:
    peak = Peak(exclude)
    peak.start()
    c0, t0 = cpu_snapshot(), time.perf_counter()
    try:
        run()
    finally:
        peak.halt.set()
    seconds = time.perf_counter() - t0
    figures = {"seconds": seconds, "cpu_s": cpu_since(c0), "peak_bytes": float(peak.peak)}
    log(f"{what}: {seconds:.1f}s, {figures['cpu_s']:.1f} CPU-s, peak {peak.peak / 2**20:,.0f} MiB")
    return figures


def check(what: str, got: dict[str, tuple[int, int, int]], want: dict[str, tuple[int, int, int]]) -> None:
    wrong = [k for k, v in want.items() if got.get(k) != v]
    if wrong or len(got) != len(want):
        k = wrong[0] if wrong else "?"
        raise SystemExit(
            f"DATA-QUALITY FAILURE: {what}: {len(wrong)} of {len(want)} keys hold a wrong fold "
            f"(e.g. {k}: {got.get(k)} against {want.get(k)}), {len(got)} keys"
        )


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--factor", type=int, default=8)
    parser.add_argument("--partitions-spark", type=int, default=16)
    parser.add_argument("--rescale-records", type=int, default=4000, help="records waiting at each rescale")
    args = parser.parse_args(argv)

    from pipelines.control import ControlPlane
    from pipelines.operations import scaling
    from pipelines.runtime import requests
    from pipelines.runtime.driver import run_job
    from pipelines.runtime.logs import jvm_stderr, quiet
    from pipelines.runtime.session import build_session
    from pipelines.state import layout
    from pipelines.storage.home import Home
    from pipelines.systems.kafka import KafkaSystem
    from testbed.servers.kafka_broker import KafkaBroker

    root = Path(tempfile.mkdtemp(prefix="bench-spark-state-"))
    home = Home(root / "home")
    broker = KafkaBroker(partitions=PARTITIONS)
    kafka: KafkaSystem | None = None
    spark = None
    stack = contextlib.ExitStack()
    try:
        broker.start()
        log(f"Kafka broker on {broker.bootstrap} (started in {broker.started_in_s:.1f}s)")
        broker_pids = {broker.process.pid} if broker.process is not None else set()
        settings = {"bootstrap_servers": broker.bootstrap}
        kafka = KafkaSystem(settings)
        produced: dict[str, list[tuple[bytes, bytes, None]]] = {}
        seqs: dict[str, dict[str, int]] = {}
        for topic, n in (("slow", args.records), ("cheap", args.records)):
            broker.create_topic(topic, PARTITIONS)
            seqs[topic] = {}
            produced[topic] = events(n, args.keys, seed=len(topic), seqs=seqs[topic])
            for i in range(0, n, 20_000):
                kafka.produce(topic, produced[topic][i : i + 20_000])
            log(f"produced {n:,} records over {args.keys:,} keys into {topic!r} ({PARTITIONS} partitions)")
        broker.create_topic("warmup", PARTITIONS)
        kafka.produce("warmup", events(2000, 200, seed=9, seqs={}))

        stack.enter_context(quiet(home))  # Spark's own log lines to a file: the restart's "Updating ..." is read there
        with jvm_stderr():
            spark = build_session(
                f"local[{max(args.factor * PARTITIONS, args.partitions_spark)}]",
                app_name="bench-spark-state",
                **{"spark.sql.streaming.stateStore.providerClass": ROCKSDB},
            )
        spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions_spark))
        results: dict[str, dict[str, float]] = {}
        for i, (topic, latency) in enumerate((("slow", args.latency_ms), ("cheap", 0.0))):
            warm = spark_query(spark, broker.bootstrap, "warmup", root / f"w{i}", root / f"w{i}.ck", 0.0)
            warm.awaitTermination()
            out, checkpoint = root / f"spark-{topic}", root / f"spark-{topic}.ck"

            def run_spark(topic: str = topic, latency: float = latency, out: Path = out, ck: Path = checkpoint) -> None:
                query = spark_query(spark, broker.bootstrap, topic, out, ck, latency)
                query.awaitTermination()
                if query.exception() is not None:
                    raise SystemExit(f"Spark's query failed: {query.exception()}")

            results[f"spark_{topic}"] = measured(f"spark transformWithStateInPandas, {topic}", run_spark, broker_pids)
            check(f"spark {topic}", spark_folds(spark, out), folds(produced[topic]))
            results[f"spark_{topic}"]["state_bytes"] = float(du(checkpoint / "state"))
            results[f"spark_{topic}"]["state_partitions"] = float(state_partitions(checkpoint))

            warm_job = our_job(home, settings, "warmup", f"warm{i}", args.factor, 0.0)
            run_job(spark, home, warm_job.name, available_now=True, progress=lambda m: None)
            config = our_job(home, settings, topic, f"ours-{topic}", args.factor, latency)

            def run_ours(name: str = config.name) -> None:
                run_job(spark, home, name, available_now=True, progress=lambda m: None)

            results[f"ours_{topic}"] = measured(f"ours at factor {args.factor}, {topic}", run_ours, broker_pids)
            check(f"ours {topic}", our_folds(home, config), folds(produced[topic]))
            state = layout.state_dir(home, config.name, "totals")
            results[f"ours_{topic}"]["state_bytes"] = float(du(Path(state.path)))

        # ---- the rescale, as each offers it
        checkpoint, out = root / "spark-slow.ck", root / "spark-slow"
        more = events(args.rescale_records, args.keys, seed=11, seqs=seqs["slow"])
        produced["slow"] += more
        kafka.produce("slow", more)
        before = state_partitions(checkpoint)
        doubled = 2 * args.partitions_spark
        spark.conf.set("spark.sql.shuffle.partitions", str(doubled))
        log_file = _spark_log(spark)
        mark = log_file.stat().st_size if log_file is not None and log_file.exists() else 0
        stopped = time.perf_counter()
        query = spark_query(spark, broker.bootstrap, "slow", out, checkpoint, args.latency_ms)
        first_done = None
        while query.isActive:
            progress = query.lastProgress
            if first_done is None and progress and progress.get("numInputRows", 0) > 0:
                first_done = time.perf_counter()
            time.sleep(0.05)
        query.awaitTermination()
        if first_done is None:
            first_done = time.perf_counter()
        spark_restart_s = first_done - stopped
        check("spark after its restart", spark_folds(spark, out), folds(produced["slow"]))
        after = state_partitions(checkpoint)
        pinned = pinned_partitions(checkpoint)
        said = _said(log_file, mark)
        log(
            f"spark: shuffle partitions set to {doubled}, restarted in {spark_restart_s:.1f}s; its state partitions "
            f"stay {after} (were {before}; the offset log pins {pinned})"
            + (f"; Spark logged: {said!r}" if said else "")
        )

        config = our_job(home, settings, "slow", "ours-live", args.factor, args.latency_ms)
        driver = threading.Thread(
            target=lambda: run_job(spark, home, config.name, available_now=False, progress=lambda m: None)
        )
        driver.start()
        control = ControlPlane(home)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and (control.checkpoints.latest_batch(config.name, 1) or -1) < 1:
                time.sleep(0.5)
            more = events(args.rescale_records, args.keys, seed=12, seqs=seqs["slow"])
            produced["slow"] += more
            kafka.produce("slow", more)
            outcome = scaling.run_all(
                home, scaling.ScalingRequest(config.name, 2 * args.factor, "bench"), say=lambda m: None
            )
            if outcome["status"] != "verified":
                raise SystemExit(f"our rescale ended {outcome['status']}: {outcome}")
            ours_downtime = float(outcome["downtime_s"])
            ours_replayed = outcome.get("records_replayed")
            end = scaling.end_positions(home, config.name)
            version = control.job_models.active_version(config.name)
            while time.monotonic() < deadline and not scaling.lag_behind(home, config.name, version, end)[0]:
                time.sleep(0.5)
        finally:
            requests.ask_stop(home, config.name)
            driver.join(timeout=300)
        check("ours after the live rescale", our_folds(home, config), folds(produced["slow"]))
        factor_after = control.job_models.active(config.name).elasticity_factor
        log(
            f"ours: live rescale {args.factor} -> {factor_after}, downtime {ours_downtime:.2f}s, "
            f"replayed {ours_replayed}"
        )
    finally:
        if spark is not None:
            spark.stop()
        stack.close()
        if kafka is not None:
            kafka.close()
        broker.close()
        shutil.rmtree(root, ignore_errors=True)

    rows = []
    for key, label in (("slow", f"{args.latency_ms:g} ms/record"), ("cheap", "cheap")):
        for who, width in (("spark", f"{args.partitions_spark} state partitions"), ("ours", f"factor {args.factor}")):
            r = results[f"{who}_{key}"]
            rows.append(
                [
                    label,
                    "Spark transformWithStateInPandas" if who == "spark" else "ours",
                    width,
                    f"{args.records:,}",
                    f"{r['seconds']:.1f}",
                    f"{args.records / r['seconds']:,.0f}",
                    f"{r['cpu_s']:.1f}",
                    f"{r['peak_bytes'] / 2**20:,.0f}",
                    f"{r['state_bytes'] / 2**20:,.1f}",
                ]
            )
    header = ["job", "reader", "width", "records", "seconds", "records/s", "CPU s", "peak MiB", "state MiB"]
    print(table(rows, header))
    print(
        f"\nrescale: Spark stopped and restarted with {doubled} shuffle partitions: {spark_restart_s:.1f}s to its "
        f"first batch, its state still in {after} partitions; ours in place {args.factor} -> {factor_after}: "
        f"{ours_downtime:.2f}s of downtime"
    )
    rate = {k: args.records / v["seconds"] for k, v in results.items()}
    figures = {
        "stateful_f8_vs_spark_tws": round(rate["ours_slow"] / rate["spark_slow"], 3),
        "stateful_cheap_vs_spark_tws": round(rate["ours_cheap"] / rate["spark_cheap"], 3),
        "ours_rps": round(rate["ours_slow"]),
        "spark_tws_rps": round(rate["spark_slow"]),
        "ours_cpu_s": round(results["ours_slow"]["cpu_s"], 1),
        "spark_tws_cpu_s": round(results["spark_slow"]["cpu_s"], 1),
        "ours_peak_bytes": int(results["ours_slow"]["peak_bytes"]),
        "spark_tws_peak_bytes": int(results["spark_slow"]["peak_bytes"]),
        "ours_state_bytes": int(results["ours_slow"]["state_bytes"]),
        "spark_state_bytes": int(results["spark_slow"]["state_bytes"]),
        "stateful_switch_downtime_s": round(ours_downtime, 3),
        "spark_restart_s": round(spark_restart_s, 3),
        "spark_state_partitions_after_change": after,
        "spark_shuffle_partitions_asked": doubled,
        "ours_factor_after_change": factor_after,
    }
    print(json.dumps({"bench": "spark_state", "figures": figures}))
    return 0


def _spark_log(spark: Any) -> Path | None:
    """The file this process's Spark logs to (``pipelines.runtime.logs``), if it logs to one."""
    from pipelines.runtime.logs import target

    found = target()
    return Path(found) if found else None


def _said(log_file: Path | None, since: int) -> str | None:
    """What Spark logged about restoring a conf from the offset log, after ``since`` bytes of its log."""
    if log_file is None or not log_file.exists():
        return None
    with log_file.open("rb") as f:
        f.seek(since)
        text = f.read().decode("utf-8", "replace")
    # Spark 4 restores the state's partitions as spark.sql.streaming.internal.stateStore.partitions
    found = re.search(r"Updating the value of conf '[^']*(?:shuffle|stateStore)\.partitions'[^\n]*", text)
    return found.group(0).strip() if found else None


if __name__ == "__main__":
    sys.exit(main())
