"""Reading Kafka vs the embedded log, on the same data, in the same run (issue 11's performance goals).

Figures (records/s of ``run_job`` available-now, Spark session start excluded):

* a cheap job (latency 0) at factor 1 on Kafka vs on the embedded log
  (goal: Kafka >= 80 % of the embedded log);
* the 2 ms/record job at factor 8 vs factor 1, on each input (goal: Kafka's
  efficiency the same as the embedded log's);
* raw reads without Spark: one whole-partition ``read`` per partition,
  records/s, Kafka vs the embedded log.

The Kafka broker is a real Apache Kafka broker, one KRaft node on 127.0.0.1
with a 256 MB heap (``testbed.servers.kafka_broker``), sharing this
machine's cores with Spark: absolute Kafka figures say little about a real
cluster; the ratios say what this module and the runtime cost.
``--bootstrap-servers`` runs against a broker that is already up instead (its
topics get a name of their own, ``bench_<hex>_cheap`` ..., and are left there),
and ``--master`` sets the session's master (default ``local[16]``, one core per
virtual task at factor 8).

Ends with one JSON line ``{"bench": "kafka", "figures": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pipelines.usage import Parser

PARTITIONS = 2


def log(message: str) -> None:
    print(f"[bench_kafka] {message}", file=sys.stderr, flush=True)


def records(n: int, keys: int, seed: int) -> list[tuple[bytes, bytes, None]]:
    rng = random.Random(seed)
    seq: dict[str, int] = {}
    out = []
    for _ in range(n):
        key = f"key-{rng.randrange(keys)}"
        s = seq.get(key, 0)
        seq[key] = s + 1
        out.append((key.encode(), json.dumps({"key": key, "seq": s, "payload": "x" * 32}).encode(), None))
    return out


def run(
    spark: Any,
    home: Any,
    name: str,
    system: str,
    stream: str,
    settings: dict,
    factor: int,
    latency_ms: float,
    max_records: int,
    expected: int,
) -> float:
    import deltalake

    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job
    from pipelines.runtime.driver import run_job

    base = JobConfig.load(str(Path(__file__).resolve().parents[1] / "include" / "jobs" / "enrichment.yaml"))
    raw = {
        **base.to_dict(),
        "name": name,
        "inputs": [{"system": system, "stream": stream}],
        "elasticity_factor": factor,
        "process_options": {"latency_ms": latency_ms},
        "batch": {"max_records": max_records, "trigger_interval": "0 seconds"},
        "trigger": "available-now",
        "sink": {"table": name},
        "dead_letter": {"table": f"{name}_dead"},
    }
    if settings:
        raw["systems"] = {system: settings}
    create_job(home, JobConfig.from_dict(raw))
    started = time.perf_counter()
    run_job(spark, home, name, available_now=True, progress=lambda m: None)
    seconds = time.perf_counter() - started
    rows = deltalake.DeltaTable(str(home.sinks / name)).to_pandas(columns=["partition", "offset"])
    if len(rows) != expected or rows.duplicated().any():
        raise SystemExit(f"DATA-QUALITY FAILURE: {name} wrote {len(rows)} rows for {expected} records")
    rate = expected / seconds
    log(f"{name}: {expected:,} records in {seconds:.1f}s = {rate:,.0f} records/s")
    return rate


def raw_reads(system: Any, stream: str, repeat: int = 3) -> float:
    ends = system.end_positions(stream)
    best = 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        total = sum(system.read(stream, p, "0", end).records.num_rows for p, end in ends.items())
        best = max(best, total / (time.perf_counter() - started))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cheap-records", type=int, default=40_000, help="records for the latency-0 job")
    parser.add_argument("--slow-records", type=int, default=4_000, help="records for the 2 ms/record job")
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--max-records", type=int, default=2000, help="records per micro-batch at factor 1")
    parser.add_argument("--bootstrap-servers", help="a running broker to use (default: start one on 127.0.0.1)")
    parser.add_argument("--master", default=f"local[{PARTITIONS * 8}]", help="Spark master of the session")
    args = parser.parse_args(argv)

    from pipelines.runtime.session import build_session
    from pipelines.storage.home import Home
    from pipelines.systems.deltalog import DeltaLog
    from pipelines.systems.kafka import KafkaSystem
    from testbed.servers.kafka_broker import KafkaBroker

    root = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    home = Home(root.resolve())
    broker = None if args.bootstrap_servers else KafkaBroker(partitions=PARTITIONS)
    bootstrap = args.bootstrap_servers if broker is None else broker.bootstrap
    settings = {"bootstrap_servers": bootstrap}
    kafka, dlog = KafkaSystem(settings), DeltaLog(home.streams)
    prefix = f"bench_{uuid.uuid4().hex[:8]}_" if args.bootstrap_servers else ""  # a shared broker's topics stay
    cheap, slow, warmup = (prefix + name for name in ("cheap", "slow", "warmup"))
    try:
        if broker is not None:
            broker.start()
            log(f"Kafka broker on {broker.bootstrap}, started in {broker.started_in_s:.1f}s")
        log(f"producing {args.cheap_records:,} + {args.slow_records:,} records into both inputs ({bootstrap})")
        for stream, n, seed in ((cheap, args.cheap_records, 1), (slow, args.slow_records, 2), (warmup, 400, 3)):
            kafka.create(stream, PARTITIONS)
            batch = records(n, args.keys, seed)
            dlog.create(stream, PARTITIONS)
            for i in range(0, n, 5000):
                dlog.produce(stream, batch[i : i + 5000])
                kafka.produce(stream, batch[i : i + 5000])
            assert sorted(dlog.end_offsets(stream).values()) == sorted(
                int(e) for e in kafka.end_positions(stream).values()
            )
        figures: dict[str, float] = {}
        figures["raw_read_deltalog_rps"] = raw_reads(dlog, cheap)
        figures["raw_read_kafka_rps"] = raw_reads(kafka, cheap)
        d, k = figures["raw_read_deltalog_rps"], figures["raw_read_kafka_rps"]
        log(f"raw reads: deltalog {d:,.0f}/s, kafka {k:,.0f}/s")

        spark = build_session(args.master, app_name="bench-kafka")
        try:
            inputs = {"deltalog": ("deltalog", {}), "kafka": ("kafka", settings)}
            for name, (system, conf) in inputs.items():  # first queries pay for Python workers: not measured
                run(spark, home, f"warm_{name}", system, warmup, conf, 8, 0, args.max_records, 400)
            rates: dict[tuple[str, str, int], float] = {}
            for name, (system, conf) in inputs.items():
                rates[(name, "cheap", 1)] = run(
                    spark, home, f"cheap_{name}_f1", system, cheap, conf, 1, 0, args.max_records, args.cheap_records
                )
                for factor in (1, 8):
                    rates[(name, "slow", factor)] = run(
                        spark,
                        home,
                        f"slow_{name}_f{factor}",
                        system,
                        slow,
                        conf,
                        factor,
                        args.latency_ms,
                        args.max_records,
                        args.slow_records,
                    )
        finally:
            spark.stop()
        figures["cheap_f1_deltalog_rps"] = rates[("deltalog", "cheap", 1)]
        figures["cheap_f1_kafka_rps"] = rates[("kafka", "cheap", 1)]
        figures["cheap_f1_kafka_vs_deltalog"] = rates[("kafka", "cheap", 1)] / rates[("deltalog", "cheap", 1)]
        for name in inputs:
            figures[f"speedup_f8_vs_f1_{name}"] = rates[(name, "slow", 8)] / rates[(name, "slow", 1)]
        figures["f8_efficiency_kafka_vs_deltalog"] = (
            figures["speedup_f8_vs_f1_kafka"] / figures["speedup_f8_vs_f1_deltalog"]
        )
        print("| figure | value |\n|---|---|")
        for key, value in figures.items():
            print(f"| {key} | {value:,.2f} |")
        print(json.dumps({"bench": "kafka", "figures": {k: round(v, 3) for k, v in figures.items()}}))
        return 0
    finally:
        kafka.close()
        if broker is not None:
            broker.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
