"""What Spark's pinned JVM libraries cost a session, and what reading the home's tables with delta-spark costs.

* Session start: a fresh driver process builds the platform's session (``build_session``) and answers its first
  SQL query, (A) with the jars of ``jvm/spark/pom.xml`` on the class path and Delta's SQL extension and catalog,
  as every session now starts, and (B) with the same confs minus those (the session before them). Rounds
  alternate A and B; each sample is a new process and JVM. Figures: wall seconds to the first answer, and the
  JVM's CPU seconds by then (steadier than wall on a shared machine).
* Delta reads: ``--tables`` small tables written by delta-rs the way the control plane writes them (``--commits``
  appends each, partitioned by job), each read with ``spark.read.format("delta")`` and counted, with Delta's
  state shuffle in 1 partition (the platform's ``spark.databricks.delta.snapshotPartitions``) and in 50
  (Delta's default), alternating per table, Delta's snapshot cache cleared before each read.

    python -m benchmarks.bench_jvm [--rounds 5] [--tables 10] [--commits 20] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipelines.runtime import session
from pipelines.usage import Parser

ADDED = ("spark.driver.extraClassPath", "spark.executor.extraClassPath", *session.DELTA_CONFS)


def child(with_jars: bool, master: str) -> None:
    """One sample: this process's session start to its first answer, printed as JSON."""
    start = time.perf_counter()
    import psutil

    if not with_jars:
        confs = session.spark_confs
        session.spark_confs = lambda m: {k: v for k, v in confs(m).items() if k not in ADDED}  # type: ignore[assignment]
    spark = session.build_session(master, "bench-jvm")
    spark.sql("SELECT count(*) FROM range(1000)").collect()
    wall = time.perf_counter() - start
    jvm = psutil.Process(spark.sparkContext._gateway.proc.pid).cpu_times()
    classpath = spark.sparkContext.getConf().get("spark.driver.extraClassPath", "")
    spark.stop()
    jars = str(session.SPARK_JARS) in classpath
    print(json.dumps({"wall_s": wall, "jvm_cpu_s": jvm.user + jvm.system, "jars": jars}))


def sessions(rounds: int, master: str) -> dict[str, Any]:
    samples: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for r in range(rounds):
        for with_jars in (True, False):
            argv = [sys.executable, "-m", "benchmarks.bench_jvm", "--child", "with" if with_jars else "without"]
            done = subprocess.run([*argv, "--master", master], capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"session sample failed ({done.returncode}):\n{done.stderr[-3000:]}")
            sample = json.loads(done.stdout.strip().splitlines()[-1])
            assert sample["jars"] is with_jars, sample
            samples[with_jars].append(sample)
            label = "with jars + Delta" if with_jars else "without"
            print(
                f"round {r + 1}/{rounds} {label}: {sample['wall_s']:.2f} s, JVM {sample['jvm_cpu_s']:.2f} CPU-s",
                file=sys.stderr,
                flush=True,
            )
    med = {k: {m: statistics.median(s[m] for s in v) for m in ("wall_s", "jvm_cpu_s")} for k, v in samples.items()}
    ratio = {
        m: statistics.median(a[m] / b[m] for a, b in zip(samples[True], samples[False], strict=True))
        for m in ("wall_s", "jvm_cpu_s")
    }
    print(f"\nsession start to first answer ({rounds} rounds, medians)")
    print(f"{'':24}{'wall s':>10}{'JVM CPU-s':>12}")
    print(f"{'A with jars + Delta':24}{med[True]['wall_s']:>10.2f}{med[True]['jvm_cpu_s']:>12.2f}")
    print(f"{'B without':24}{med[False]['wall_s']:>10.2f}{med[False]['jvm_cpu_s']:>12.2f}")
    print(f"{'A/B (pairwise median)':24}{ratio['wall_s']:>10.3f}{ratio['jvm_cpu_s']:>12.3f}")
    return {
        "session_with_jars_s": round(med[True]["wall_s"], 2),
        "session_without_s": round(med[False]["wall_s"], 2),
        "jars_vs_without_wall": round(ratio["wall_s"], 3),
        "jvm_cpu_with_jars_s": round(med[True]["jvm_cpu_s"], 2),
        "jvm_cpu_without_s": round(med[False]["jvm_cpu_s"], 2),
        "jars_vs_without_jvm_cpu": round(ratio["jvm_cpu_s"], 3),
    }


def reads(tables: int, commits: int, master: str) -> dict[str, Any]:
    import pyarrow as pa
    from deltalake import write_deltalake

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for t in range(tables):
            path = Path(tmp) / f"table{t}"
            for c in range(commits):
                rows = pa.table({"job": ["a", "b"], "batch_id": [c, c], "value": [float(t), float(c)]})
                write_deltalake(str(path), rows, mode="append", partition_by=["job"])
            paths.append(path)
        spark = session.build_session(master, "bench-jvm-reads")
        try:
            spark.read.format("delta").load(str(paths[0])).count()  # warm: classes, Python-free planning
            took: dict[str, list[float]] = {"1": [], "50": []}
            for path in paths:
                for partitions in ("1", "50"):
                    spark.conf.set("spark.databricks.delta.snapshotPartitions", partitions)
                    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
                    start = time.perf_counter()
                    count = spark.read.format("delta").load(str(path)).count()
                    took[partitions].append(time.perf_counter() - start)
                    assert count == 2 * commits, count
            print(f"{len(paths)} tables read", file=sys.stderr, flush=True)
        finally:
            spark.stop()
    one, fifty = statistics.median(took["1"]), statistics.median(took["50"])
    print(f"\nreading a small Delta table ({commits} commits) with delta-spark, median of {tables}")
    print(f"{'state shuffle partitions':26}{'s per table':>12}")
    print(f"{'1 (ours)':26}{one:>12.2f}")
    print(f"{'50 (Delta default)':26}{fifty:>12.2f}")
    print(f"{'50 / 1':26}{fifty / one:>12.2f}")
    return {
        "read_1_partition_s": round(one, 3),
        "read_50_partitions_s": round(fifty, 3),
        "read_50_vs_1": round(fifty / one, 2),
    }


def main() -> None:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--child", choices=("with", "without"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child == "with", args.master)
        return
    figures = sessions(args.rounds, args.master) | reads(args.tables, args.commits, args.master)
    print(json.dumps({"bench": "jvm", "figures": figures}))


if __name__ == "__main__":
    main()
