"""Benchmark of the Spark runtime: does the elasticity factor buy throughput without losing per-key order?

    python -m benchmarks.bench_runtime [--records N] [--keys K] [--latency-ms 2] [--factors 1,2,4,8]
                                       [--slots S] [--max-records M] [--trigger-interval "0 seconds"]
                                       [--overhead-records N] [--cheap-max-records M] [--fixed-batches B]

Defaults: 96,000 records over 200 keys, 2 ms per record, factors 1, 2, 4, 8 in ``local[16]``, 8,000 records
per micro-batch: factor 1 sleeps 96 s per partition (about 2 minutes of wall time), and the whole benchmark
takes about 10 minutes on 2 shared cores (a minute of it is session start and warm-up). Progress goes to
stderr, the tables to stdout. (Until 2026-11-23 the default was 24,000 records: factor 8 then ran one 8 s
batch, of which query start and the batch's fixed cost were half, so the ratio measured start-up, not
throughput; ``--records 24000`` still runs it.)

What runs, in ONE SparkSession (session start-up is excluded from every figure):

* a stream ``events`` of the embedded Delta log with 2 partitions and ``--records`` keyed JSON events
  over ``--keys`` keys (``{"key": "key-3", "seq": 17, ...}``, ``seq`` increasing per key in production
  order);
* a warm-up (an elastic job and a baseline run on a small stream) so Python workers are started, and an
  elastic warm-up at each factor right before its timed run (Spark stops Python workers idle for a minute);
* **elastic**: for each factor X, a fresh job (own name, own sink) at factor X, run available-now with
  the demo enrichment (``latency_ms`` of sleep per record): wall time of ``run_job``, records/s, ratio to
  factor 1, per-key order violations, lost and duplicated records;
* **offset-ranges** baseline, what Spark's Kafka source does with ``minPartitions``: a plain PySpark job
  that splits each partition into X contiguous offset ranges, one Spark task each, reads them straight from
  the log and runs the same process function. Faster, but records of one key run concurrently: expect
  order violations (that is the point);
* **routing overhead**: the same two at latency 0 (factor 1 vs 1 range per partition, and the largest
  factor), so what remains is the cost of the elastic machinery (streaming, key-bucket routing, lineage,
  exactly-once sink, checkpoints). These cheap runs admit ``--cheap-max-records`` (100,000) per micro-batch
  at factor 1: a job that spends no time per record is configured with batches of about a second of work,
  as Spark users size ``maxOffsetsPerTrigger`` (which Spark leaves unlimited by default); at 8,000 per batch
  the per-batch cost below, not the records, sets its speed;
* **fixed cost per micro-batch**: ``--fixed-batches`` micro-batches of 100 records at factor 1 and latency 0,
  so a batch's time is its fixed cost: the median per batch, split into Spark's parts (planning, offset log,
  commit log, the tasks' Spark job) and ours inside the job (log read, processing, sink commit, checkpoint
  and metrics commits); beside it, **Spark's floor**, the same micro-batches from a do-nothing Python
  streaming source straight into a do-nothing Python Arrow writer (``benchmarks/spark_floor.py``):
  what any runtime on Spark's Python data source API pays per batch on this machine, so the difference is
  the part we own (``batch_overhead_floor_s``, ``batch_overhead_vs_floor``).

Order violations: for each key, the sink rows sorted by processing order, counting places where ``seq``
goes down. Elastic processing order is ``(batch_id, task_seq)`` (all of a key's records are in one virtual
task); the process function here (the demo one, plus a ``processed_ns`` stamp) also stamps ``time.time_ns()``
per record, and both jobs are also judged by that stamp, the same yardstick for both.

Slots: Spark runs at most N tasks at once in ``local[N]``. The work here is waiting (sleep, i.e. a remote
call), not CPU, so N is set by the number of tasks we want in flight, not by the 2 cores: the default is
``partitions x max(factor)`` (16 for factors up to 8), so every virtual task of the largest factor runs at
once. With ``local[2]`` factor 8 would run 16 tasks two at a time and show no gain at all.

Batch size: admission control (``batch.max_records`` times the factor, shared by the partitions) cuts the
backlog into micro-batches; each costs a fixed overhead (planning, offset log, sink commit, checkpoint and
metrics commits, about a second here). The budget grows with the factor so each virtual task's share stays
the same. (The offset-range baseline has no micro-batches: it reads the whole backlog in one Spark job.)

Read amplification: every virtual task reads its whole partition range and keeps its key bucket, so at
factor X the log serves X times the records needed; the metrics table's ``records_fetched`` vs
``records_in`` show it.

Diagnosis: a second table splits each elastic run's wall time into the sleep floor (busiest virtual task per
batch, which key-bucket skew sets: with 200 keys a bucket at factor 8 holds ~12 keys and the busiest has
~1.6x the mean), the measured processing window, the start-up stagger of the virtual tasks, the per-batch
overhead and the per-query start/stop. ``CPU s`` is the CPU time of this process and its descendants (the
JVM, Python daemons and workers) during a run; a "machine check" first measures how well 1 and ``slots``
concurrent sleeping processes keep their pace on this machine right now. Only ratios inside one run compare:
these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.usage import Parser

PARTITIONS = 2
WARMUP_RECORDS = 2000  # in batches of 400, so most pooled Python workers import what every role needs
OUTPUT_SCHEMA = "event_key STRING, seq BIGINT, payload STRING, enriched STRING, processed_ns BIGINT"
_START = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the process function (runs on executors)


def process(record: Any, ctx: Any) -> dict[str, Any]:
    """The demo enrichment plus the time it ran, so both modes are judged by the same clock."""
    from pipelines.demo.enrich import process as enrich

    row = enrich(record, ctx)
    row["processed_ns"] = time.time_ns()
    return row


process.__pipelines_per_record__ = True  # type: ignore[attr-defined]


# ------------------------------------------------------------------ the machine


def sleep_efficiency(workers: int, latency_ms: float, seconds: float = 1.0) -> float:
    """How fast ``workers`` processes, each sleeping ``latency_ms`` per record, get through their records
    on this machine right now, relative to the ideal (1.0): the ceiling for any runtime on it."""
    import subprocess

    n = max(1, int(seconds * 1000 / max(latency_ms, 0.1)))
    code = (
        "import json, sys, time\n"
        "n, pause = int(sys.argv[1]), float(sys.argv[2])\n"
        "t = time.perf_counter()\n"
        "for _ in range(n):\n"
        '    json.loads(\'{"key": "key-1", "seq": 1}\')\n'
        "    time.sleep(pause)\n"
        "print(time.perf_counter() - t)\n"
    )
    cmd = [sys.executable, "-c", code, str(n), str(latency_ms / 1000)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(workers)]
    took = [float(p.communicate()[0]) for p in procs]
    return n * latency_ms / 1000 / max(took)


def cpu_snapshot() -> dict[int, float]:
    """CPU seconds (user + system, reaped children included) of this process and each of its descendants: the
    Spark JVM, its Python daemons and workers. On a 2-core machine, CPU s close to 2 x wall s means CPU-bound."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    mine = {os.getpid()}
    changed = True
    while changed:
        new = {pid for pid, ppid in parent.items() if ppid in mine and pid not in mine}
        changed = bool(new)
        mine |= new
    return {pid: used[pid] for pid in mine}


def cpu_since(before: dict[int, float]) -> float:
    """CPU seconds used since ``before`` by the processes alive now; a lower bound.

    Per process, not summed first: a descendant that exits adds its time to
    our counts only if a counted ancestor reaps it, and a difference of sums
    once came out at -51.8 s (Python workers stopped during the run). A
    process that exited since ``before`` counts 0 here.
    """
    total = 0.0
    for pid, now in cpu_snapshot().items():
        then = before.get(pid, 0.0)
        total += now - then if now >= then else now  # less than before: the pid was reused by a new process
    return total


class PeakRss:
    """The largest resident memory of this process tree (JVM, Python daemons and workers) while in the block, MiB.

    Sampled every ``every_s`` in a thread, summed over the tree's processes: pages the Python workers share
    with the daemon they forked from count once per process, so it is an upper bound, as ``ps`` would add it.
    """

    def __init__(self, every_s: float = 0.25) -> None:
        import threading

        self.every_s = every_s
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while True:
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:  # ended between the listing and the read
                    continue
            self.peak_mib = max(self.peak_mib, total / 2**20)
            if self._stop.wait(self.every_s):
                return


# ------------------------------------------------------------------ data


def produce(home: Any, stream: str, records: int, keys: int, seed: int = 7) -> list[int]:
    """Keyed events over ``keys`` keys with a per-key seq; returns records per partition."""
    from pipelines.systems.deltalog import DeltaLog

    rng = random.Random(seed)
    dlog = DeltaLog(home.streams)
    dlog.create(stream, PARTITIONS)
    next_seq: dict[str, int] = {}
    chunk = 4000
    for first in range(0, records, chunk):
        batch = []
        for _ in range(min(chunk, records - first)):
            key = f"key-{rng.randrange(keys)}"
            seq = next_seq.get(key, 0)
            next_seq[key] = seq + 1
            value = json.dumps({"key": key, "seq": seq, "payload": "x" * 32})
            batch.append((key.encode(), value.encode(), None))
        dlog.produce(stream, batch)
    ends = dlog.end_offsets(stream)
    return [ends[p] for p in sorted(ends)]


# ------------------------------------------------------------------ results


@dataclass
class Run:
    mode: str
    factor: int
    tasks: int
    produced: int
    seconds: float
    rows: int = 0
    lost: int = 0
    duplicated: int = 0
    violations: int = -1  # by the mode's processing order
    violations_clock: int = -1  # by processed_ns
    keys_hit: int = 0  # keys with at least one violation
    dead: int = 0
    batches: int = 0
    critical_s: float = 0.0  # sum over batches of the largest task's sleep
    window_s: float = 0.0  # sum over batches of first-to-last processed record
    stagger_s: float = 0.0  # sum over batches of the spread of the virtual tasks' first records
    skew: float = 1.0  # records of the busiest task / mean records per task, in the largest batch
    fetched: float = 0.0
    needed: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    cpu_s: float = 0.0
    peak_rss_mib: float = 0.0  # the process tree's, while it ran (PeakRss)
    to_first_s: float = 0.0  # run start to the first record processed
    after_last_s: float = 0.0  # last record processed to the end of the run

    @property
    def rate(self) -> float:
        return self.produced / self.seconds if self.seconds else 0.0


def check(run: Run, df: Any, order: list[str]) -> None:
    """Lost/duplicated records and per-key order violations of a result frame."""
    run.rows = len(df)
    unique = len(df.drop_duplicates(["partition", "offset"]))
    run.lost = run.produced - unique
    run.duplicated = run.rows - unique
    run.violations, run.keys_hit = violations(df, order)
    run.violations_clock, _ = violations(df, ["processed_ns"])


def violations(df: Any, order: list[str]) -> tuple[int, int]:
    """Places where a key's seq decreases in ``order``, and how many keys have any."""
    ordered = df.sort_values([*order], kind="stable")
    drops = ordered.groupby("event_key", sort=False)["seq"].diff() < 0
    hit = ordered.loc[drops, "event_key"].nunique()
    return int(drops.sum()), int(hit)


# ------------------------------------------------------------------ elastic jobs


class ProgressListener:
    """Collects ``durationMs`` of every micro-batch per query name (a StreamingQueryListener)."""

    def __init__(self) -> None:
        self.batches: dict[str, list[dict[str, Any]]] = {}
        self.names: dict[str, str] = {}  # query id -> name
        self.terminated: set[str] = set()  # names; the listener bus is ordered, so all progress came before

    def wait(self, name: str, timeout: float = 10.0) -> list[dict[str, Any]]:
        end = time.monotonic() + timeout
        while name not in self.terminated and time.monotonic() < end:
            time.sleep(0.05)
        return self.batches.get(name, [])

    def make(self) -> Any:
        from pyspark.sql.streaming import StreamingQueryListener

        outer = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                outer.names[str(event.id)] = event.name

            def onQueryProgress(self, event: Any) -> None:
                p = event.progress
                outer.batches.setdefault(p.name, []).append(
                    {"batch": p.batchId, "rows": p.numInputRows, **{k: float(v) for k, v in p.durationMs.items()}}
                )

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                outer.terminated.add(outer.names.get(str(event.id), str(event.id)))

        return _Listener()


def run_elastic(
    spark: Any,
    home: Any,
    listener: ProgressListener | None,
    *,
    name: str,
    stream: str,
    factor: int,
    latency_ms: float,
    max_records: int,
    trigger_interval: str,
    produced: int,
    mode: str = "elastic",
) -> Run:
    import deltalake

    from pipelines.control import ControlPlane
    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job
    from pipelines.runtime.driver import run_job

    base = JobConfig.load(Path(__file__).resolve().parents[1] / "include" / "jobs" / "enrichment.yaml")
    cfg = JobConfig.from_dict(
        {
            **base.to_dict(),
            "name": name,
            "inputs": [{"system": "deltalog", "stream": stream}],
            "elasticity_factor": factor,
            "process": "benchmarks.bench_runtime:process",
            "output_schema": OUTPUT_SCHEMA,
            "process_options": {"latency_ms": latency_ms},
            "batch": {"max_records": max_records, "trigger_interval": trigger_interval},
            "trigger": "available-now",
            "sink": {"table": name},
            "dead_letter": {"table": f"{name}_dead"},
        }
    )
    model = create_job(home, cfg)
    batches_seen: list[str] = []
    c0, t0, wall0 = cpu_snapshot(), time.perf_counter(), time.time_ns()
    run_job(spark, home, name, available_now=True, progress=batches_seen.append)
    seconds = time.perf_counter() - t0
    wall1 = time.time_ns()
    run = Run(mode, factor, model.task_count, produced, seconds, cpu_s=cpu_since(c0))
    df = deltalake.DeltaTable(str(home.sinks / name)).to_pandas()
    run.dead = len(deltalake.DeltaTable(str(home.sinks / f"{name}_dead")).to_pandas())
    check(run, df, ["batch_id", "task_seq"])
    if len(df):
        run.to_first_s = (int(df["processed_ns"].min()) - wall0) / 1e9
        run.after_last_s = (wall1 - int(df["processed_ns"].max())) / 1e9
    # the critical path: per batch, the task with the most records sleeps the longest
    per_task = df.groupby(["batch_id", "virtual_task"]).size()
    run.critical_s = float(per_task.groupby(level=0).max().sum()) * latency_ms / 1000.0
    largest = per_task.groupby(level=0).sum().idxmax()
    run.skew = float(per_task.loc[largest].max() / per_task.loc[largest].mean())
    run.batches = int(df["batch_id"].nunique())
    stamps = df.groupby("batch_id")["processed_ns"].agg(["min", "max"])
    run.window_s = float((stamps["max"] - stamps["min"]).sum()) / 1e9
    firsts = df.groupby(["batch_id", "virtual_task"])["processed_ns"].min().groupby(level=0)
    run.stagger_s = float((firsts.max() - firsts.min()).sum()) / 1e9
    metrics = ControlPlane(home).metrics.read(
        name, metrics=["records_fetched", "records_in", "read_s", "key_hash_s", "process_s", "sink_commit_s"]
    )
    sums = metrics.groupby("metric")["value"].sum().to_dict()
    run.fetched, run.needed = sums.get("records_fetched", 0.0), sums.get("records_in", 0.0)
    run.timings = {k: float(v) for k, v in sums.items() if k.endswith("_s")}
    if listener is not None:
        progress = listener.wait(f"{name}-v{model.version}")  # listener events arrive asynchronously
        for key in ("triggerExecution", "addBatch", "latestOffset", "queryPlanning", "walCommit", "commitOffsets"):
            run.timings[f"spark_{key}"] = sum(b.get(key, 0.0) for b in progress) / 1000.0
        run.timings["spark_batches"] = float(len(progress))
    return run


# ------------------------------------------------------------------ the offset-ranges baseline


def range_reader(home_root: str, stream: str, latency_ms: float) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """mapInArrow function: each row is one offset range; read it from the log, run ``process`` per record."""

    def read_ranges(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from benchmarks.bench_runtime import process as fn
        from pipelines.jobs.process import Record, TaskContext
        from pipelines.runtime.processing import column_values
        from pipelines.systems.deltalog import DeltaLog

        dlog = DeltaLog(Path(home_root) / "streams")
        ctx = TaskContext("baseline", 0, "range", {"latency_ms": latency_ms})
        for batch in batches:
            for p, start, end in zip(*(batch.column(c).to_pylist() for c in ("p", "start", "end")), strict=True):
                table = dlog.read_range(stream, p, start, end)
                cols = {c: table.column(c).to_pylist() for c in ("offset", "key", "value", "headers")}
                cols["timestamp"] = column_values(table.column("timestamp"))  # the runtime's own conversion
                out: dict[str, list[Any]] = {c: [] for c in ("partition", "offset", "event_key", "seq", "processed_ns")}
                for i in range(table.num_rows):
                    rec = Record(
                        stream,
                        p,
                        str(cols["offset"][i]),
                        cols["key"][i],
                        cols["value"][i],
                        cols["timestamp"][i],
                        cols["headers"][i],
                    )
                    row = fn(rec, ctx)
                    out["partition"].append(p)
                    out["offset"].append(str(cols["offset"][i]))
                    out["event_key"].append(row["event_key"])
                    out["seq"].append(row["seq"])
                    out["processed_ns"].append(row["processed_ns"])
                yield pa.RecordBatch.from_pydict(
                    out,
                    schema=pa.schema(
                        [
                            ("partition", pa.int32()),
                            ("offset", pa.string()),
                            ("event_key", pa.string()),
                            ("seq", pa.int64()),
                            ("processed_ns", pa.int64()),
                        ]
                    ),
                )

    return read_ranges


def run_ranges(
    spark: Any,
    home: Any,
    *,
    stream: str,
    ranges: int,
    latency_ms: float,
    produced: int,
    out: Path,
    mode: str = "offset-ranges",
) -> Run:
    import pandas as pd
    import pyarrow.parquet as pq

    from pipelines.systems.deltalog import DeltaLog

    ends = DeltaLog(home.streams).end_offsets(stream)
    rows = []
    for p in sorted(ends):
        end = ends[p]
        cuts = [end * i // ranges for i in range(ranges + 1)]
        rows += [(p, cuts[i], cuts[i + 1]) for i in range(ranges) if cuts[i + 1] > cuts[i]]
    c0, t0 = cpu_snapshot(), time.perf_counter()
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), "p INT, start LONG, `end` LONG")
    result = df.mapInArrow(
        range_reader(str(home.root), stream, latency_ms),
        "partition INT, offset STRING, event_key STRING, seq BIGINT, processed_ns BIGINT",
    )
    result.write.mode("overwrite").parquet(str(out))
    seconds = time.perf_counter() - t0
    run = Run(mode, ranges, len(rows), produced, seconds, cpu_s=cpu_since(c0))
    frame: pd.DataFrame = pq.read_table(str(out)).to_pandas()
    check(run, frame, ["processed_ns"])
    run.batches = 1
    run.fetched = run.needed = float(produced)
    return run


# ------------------------------------------------------------------ report


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(runs: list[Run]) -> None:
    first = {r.mode: r for r in runs if r.factor == 1}
    print(
        table(
            [
                [
                    r.mode,
                    str(r.factor),
                    str(r.tasks),
                    f"{r.produced:,}",
                    f"{r.seconds:.1f}",
                    f"{r.rate:,.0f}",
                    f"{r.rate / first[r.mode].rate:.2f}x" if r.mode in first else "-",
                    f"{r.violations:,} ({r.keys_hit} keys)",
                    f"{r.violations_clock:,}",
                    str(r.lost),
                    str(r.duplicated),
                    f"{r.cpu_s:.1f}",
                ]
                for r in runs
            ],
            [
                "mode",
                "factor",
                "tasks",
                "records",
                "seconds",
                "records/s",
                "vs factor 1",
                "order violations",
                "by clock",
                "lost",
                "duplicated",
                "CPU s",
            ],
        )
    )
    elastic = [r for r in runs if r.mode.startswith("elastic")]
    if not elastic:
        return
    print(
        "\n# elastic runs, where the time goes"
        "\n#   sleep s: per batch, the busiest virtual task's records x latency, summed (the floor);"
        "\n#   cap: factor 1's sleep s / this one = the best speed-up the key-bucket skew allows;"
        "\n#   skew: busiest / mean virtual task records in the largest batch;"
        "\n#   window s: per batch, first to last record processed (measured), summed;"
        "\n#   stagger s: per batch, how much later the last virtual task began than the first (task start,"
        " log read, hashing), summed;"
        "\n#   per-batch s: (Spark trigger time - window) / batches: planning, task start and log reads"
        " before the first record, sink write and commit after the last;"
        "\n#   outside s: wall - Spark trigger time: query start (source runner, initial offsets) and stop;"
        "\n#   to 1st / after last: run start to the first record processed, last record processed to the end"
    )
    rows = []
    for r in elastic:
        t = r.timings
        trigger = t.get("spark_triggerExecution", 0.0)
        base = first.get(r.mode)
        rows.append(
            [
                r.mode,
                str(r.factor),
                str(r.batches),
                f"{r.critical_s:.1f}",
                f"{base.critical_s / r.critical_s:.2f}x" if base and r.critical_s else "-",
                f"{r.skew:.2f}",
                f"{r.window_s:.1f}",
                f"{r.stagger_s:.1f}",
                f"{(trigger - r.window_s) / max(r.batches, 1):.2f}" if trigger else "-",
                f"{r.seconds - trigger:.1f}" if trigger else "-",
                f"{r.to_first_s:.1f} / {r.after_last_s:.1f}",
                f"{t.get('sink_commit_s', 0.0):.2f}",
                f"{t.get('read_s', 0.0):.1f}",
                f"{r.fetched:,.0f}/{r.needed:,.0f} = {r.fetched / r.needed:.1f}x" if r.needed else "-",
                str(r.dead),
            ]
        )
    print(
        table(
            rows,
            [
                "mode",
                "factor",
                "batches",
                "sleep s",
                "cap",
                "skew",
                "window s",
                "stagger s",
                "per-batch s",
                "outside s",
                "to 1st / after last s",
                "sink commit s",
                "log read s (all tasks)",
                "records fetched/needed",
                "dead",
            ],
        )
    )


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=96_000, help="records in the stream (2 partitions)")
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=2.0, help="simulated remote call per record")
    parser.add_argument("--factors", default="1,2,4,8")
    parser.add_argument("--slots", type=int, help="local[N]; default partitions x max factor")
    parser.add_argument(
        "--max-records", type=int, default=8000, help="batch.max_records at factor 1 (times the factor)"
    )
    parser.add_argument("--trigger-interval", default="0 seconds")
    parser.add_argument("--overhead-records", type=int, help="records for the latency-0 runs (default --records)")
    parser.add_argument(
        "--cheap-max-records", type=int, default=100_000, help="batch.max_records at factor 1 of the latency-0 runs"
    )
    parser.add_argument("--fixed-batches", type=int, default=30, help="micro-batches of 100 records (0: skip)")
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the untimed warm-ups: the figures then include Python workers' start (a check that it runs)",
    )
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--home", help="state directory (default: a temporary one, removed at the end)")
    args = parser.parse_args(argv)
    factors = [int(f) for f in args.factors.split(",")]
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    if 1 not in factors:
        factors = [1, *factors]
    slots = args.slots or PARTITIONS * max(factors)

    from pipelines.runtime.session import build_session
    from pipelines.storage.home import Home

    root = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    if args.home:
        shutil.rmtree(root, ignore_errors=True)
    home = Home(root.resolve())
    try:
        log(f"producing {args.records:,} records over {args.keys} keys into {PARTITIONS} partitions ({root})")
        per_partition = produce(home, "events", args.records, args.keys)
        log(f"records per partition: {per_partition}")
        produce(home, "warmup", WARMUP_RECORDS, 20, seed=1)
        overhead_records = args.overhead_records or args.records
        if not args.skip_overhead and overhead_records != args.records:
            produce(home, "plain", overhead_records, args.keys, seed=3)
        overhead_stream = "events" if overhead_records == args.records else "plain"
        if args.fixed_batches:
            produce(home, "tiny", args.fixed_batches * FIXED_BATCH_RECORDS, 20, seed=5)

        if args.latency_ms > 0:
            alone = sleep_efficiency(1, args.latency_ms)
            together = sleep_efficiency(slots, args.latency_ms)
            machine = (
                f"# machine check: {args.latency_ms} ms sleeps run at {alone:.0%} of ideal in 1 process, "
                f"{together:.0%} in {slots} concurrent processes (the ceiling: max speed-up ~ "
                f"{slots * together / alone:.1f}x over 1 process)"
            )
            log(machine[2:])
        else:
            machine = ""
        t = time.perf_counter()
        spark = build_session(f"local[{slots}]", app_name="bench-runtime")
        log(f"session local[{slots}] started in {time.perf_counter() - t:.1f}s (excluded)")
        listener = ProgressListener()
        try:
            spark.streams.addListener(listener.make())
        except Exception as e:  # the breakdown is a diagnosis, not the benchmark
            log(f"no streaming listener ({e}); Spark-side breakdown unavailable")
            listener = None  # type: ignore[assignment]

        common = {"max_records": args.max_records, "trigger_interval": args.trigger_interval}
        warmed = itertools.count()

        def warm(factor: int) -> None:
            """Start the Python workers a run at ``factor`` needs, untimed. Spark stops a Python worker idle for a
            minute, so without this a later run (factor 8 needs 48 of them: reader, processor and writer per
            task) starts them while it is timed: ~0.4 s of imports each, 10 s of stagger on 2 cores."""
            if args.no_warm_up:
                return
            run_elastic(
                spark,
                home,
                None,
                name=f"warmup_{next(warmed)}",
                stream="warmup",
                factor=factor,
                latency_ms=0,
                produced=WARMUP_RECORDS,
                max_records=WARMUP_RECORDS // 5,
                trigger_interval=args.trigger_interval,
            )

        t = time.perf_counter()
        if not args.no_warm_up:
            warm(max(factors))
            run_ranges(
                spark,
                home,
                stream="warmup",
                ranges=max(factors),
                latency_ms=0,
                produced=WARMUP_RECORDS,
                out=root / "out" / "warmup",
            )
            log(f"warm-up done in {time.perf_counter() - t:.1f}s (excluded)")

        runs: list[Run] = []
        for f in factors:  # interleaved, so both modes see the same machine load
            warm(f)
            log(f"elastic factor {f}: {PARTITIONS * f} virtual tasks, {args.latency_ms} ms/record ...")
            r = run_elastic(
                spark,
                home,
                listener,
                name=f"bench_f{f}",
                stream="events",
                factor=f,
                latency_ms=args.latency_ms,
                produced=args.records,
                **common,
            )
            runs.append(r)
            log(f"  {r.seconds:.1f}s, {r.rate:,.0f} records/s, {r.batches} batches, {r.violations} violations")
            if not args.skip_baseline:
                log(f"offset ranges x{f}: {PARTITIONS * f} Spark tasks ...")
                r = run_ranges(
                    spark,
                    home,
                    stream="events",
                    ranges=f,
                    latency_ms=args.latency_ms,
                    produced=args.records,
                    out=root / "out" / f"ranges_{f}",
                )
                runs.append(r)
                log(f"  {r.seconds:.1f}s, {r.rate:,.0f} records/s, {r.violations} violations")
        if not args.skip_overhead:
            for f in sorted({1, max(factors)}):
                warm(f)
                log(f"latency 0, elastic factor {f} ...")
                runs.append(
                    run_elastic(
                        spark,
                        home,
                        listener,
                        name=f"plain_f{f}",
                        stream=overhead_stream,
                        factor=f,
                        latency_ms=0,
                        produced=overhead_records,
                        mode="elastic lat=0",
                        max_records=args.cheap_max_records,
                        trigger_interval=args.trigger_interval,
                    )
                )
                log(f"latency 0, offset ranges x{f} ...")
                runs.append(
                    run_ranges(
                        spark,
                        home,
                        stream=overhead_stream,
                        ranges=f,
                        latency_ms=0,
                        produced=overhead_records,
                        out=root / "out" / f"plain_{f}",
                        mode="ranges lat=0",
                    )
                )
        fixed = None
        if args.fixed_batches:
            log(f"fixed cost: {args.fixed_batches} micro-batches of {FIXED_BATCH_RECORDS} records at factor 1 ...")
            warm(1)
            fixed = fixed_cost(spark, home, listener, args.fixed_batches, args.trigger_interval)
            log(f"  {fixed['batch_s']:.3f}s per batch (median)")
            if listener is not None:
                from benchmarks.spark_floor import floor_batch_s

                log(f"Spark's floor: {args.fixed_batches} micro-batches of a do-nothing Python source and sink ...")
                fixed["floor"] = floor_batch_s(spark, listener, args.fixed_batches, FIXED_BATCH_RECORDS)
                log(f"  {fixed['floor']['batch']:.3f}s per batch (median)")
        spark.stop()
    finally:
        if not args.home:
            shutil.rmtree(root, ignore_errors=True)

    print(
        f"\n# {args.records:,} records, {args.keys} keys, {PARTITIONS} partitions, {args.latency_ms} ms/record, "
        f"local[{slots}], batch.max_records {args.max_records:,}, trigger {args.trigger_interval!r}"
    )
    load_after = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# load average before {load_before}, after {load_after} ({os.cpu_count()} cores)")
    if machine:
        print(machine)
    print(f"# ideal at factor 1: {args.records / PARTITIONS * args.latency_ms / 1000:.1f}s of sleep per partition\n")
    order = ["elastic", "offset-ranges", "elastic lat=0", "ranges lat=0"]
    report(sorted(runs, key=lambda r: (order.index(r.mode), r.factor)))
    by = {(r.mode, r.factor): r for r in runs}
    top = max(factors)
    e1, et = by.get(("elastic", 1)), by.get(("elastic", top))
    if e1 and et:
        ok = et.rate / e1.rate >= 6.8 and et.violations == 0 and et.lost == 0 and et.duplicated == 0
        print(
            f"\nelastic factor {top} vs factor 1: {et.rate / e1.rate:.2f}x, {et.violations} order violations "
            f"-> goal (>= 6.8x, 0 violations (issue 14)) {'MET' if ok else 'NOT MET'}"
        )
    p1, b1 = by.get(("elastic lat=0", 1)), by.get(("ranges lat=0", 1))
    if p1 and b1:
        print(
            f"routing overhead at factor 1, latency 0: elastic {p1.seconds:.1f}s vs plain range read "
            f"{b1.seconds:.1f}s = {p1.seconds / b1.seconds:.2f}x the time"
        )
    pt, bt = by.get(("elastic lat=0", top)), by.get(("ranges lat=0", top))
    if pt and bt and top != 1:
        print(
            f"at factor {top}, latency 0: elastic {pt.seconds:.1f}s vs {top} ranges/partition {bt.seconds:.1f}s "
            f"= {pt.seconds / bt.seconds:.2f}x; log records fetched {pt.fetched:,.0f} for {pt.needed:,.0f} "
            f"needed ({pt.fetched / max(pt.needed, 1):.1f}x read amplification)"
        )
    if fixed:
        print(
            f"\n# fixed cost per micro-batch: medians over {fixed['batches']} batches of {FIXED_BATCH_RECORDS} records"
        )
        floor = fixed.get("floor", {})
        print(
            table(
                [
                    [label, f"{v * 1000:.0f}", f"{floor[k] * 1000:.0f}" if k in floor else ""]
                    for k, (label, v) in fixed["parts"].items()
                ],
                ["part", "ms", "Spark's floor, ms"],
            )
        )
        if floor:
            print(
                "# Spark's floor: the same micro-batches (100 records, 2 input partitions, available-now)"
                "\n# from a do-nothing Python streaming source to a do-nothing Python Arrow writer"
                " (benchmarks/spark_floor.py)"
            )
    figures = summary(by, top)
    if fixed:
        figures["batch_overhead_s"] = round(fixed["batch_s"], 3)
        figures["batch_overhead_parts_ms"] = {k: round(v * 1000) for k, (_, v) in fixed["parts"].items()}
        if "floor" in fixed:
            figures["batch_overhead_floor_s"] = round(fixed["floor"]["batch"], 3)
            figures["batch_overhead_vs_floor"] = round(fixed["batch_s"] / fixed["floor"]["batch"], 3)
    broken = [
        f"{r.mode} x{r.factor}: {r.lost} lost, {r.duplicated} duplicated, {r.violations} order violations"
        for r in runs
        if r.mode.startswith("elastic") and (r.lost or r.duplicated or r.violations)
    ]
    for line in broken:
        print(f"DATA-QUALITY FAILURE {line}", file=sys.stderr)
    print(json.dumps({"bench": "runtime", "figures": figures}))
    return 1 if broken else 0


FIXED_BATCH_RECORDS = 100


def fixed_cost(spark: Any, home: Any, listener: ProgressListener | None, batches: int, interval: str) -> dict[str, Any]:
    """Median time of a micro-batch of ``FIXED_BATCH_RECORDS`` records (50 per task), split into its parts."""
    import statistics

    from pipelines.control import ControlPlane

    name = "fixed_f1"
    run = run_elastic(
        spark,
        home,
        listener,
        name=name,
        stream="tiny",
        factor=1,
        latency_ms=0,
        produced=batches * FIXED_BATCH_RECORDS,
        max_records=FIXED_BATCH_RECORDS,
        trigger_interval=interval,
        mode="fixed",
    )
    if run.lost or run.duplicated or run.violations:
        raise SystemExit(
            f"DATA-QUALITY FAILURE fixed-cost run: {run.lost} lost, {run.duplicated} duplicated, "
            f"{run.violations} order violations"
        )
    progress = [b for b in (listener.batches.get(f"{name}-v1", []) if listener else []) if b.get("rows")]
    metrics = ControlPlane(home).metrics.read(name)
    metrics = metrics[metrics["batch_id"] >= 0]
    per_batch = metrics.groupby(["metric", "batch_id"])["value"]

    def ours(metric: str, how: str = "sum") -> float:
        values = getattr(per_batch, how)()
        return float(statistics.median(values.loc[metric])) if metric in values.index.get_level_values(0) else 0.0

    def spark_part(key: str) -> float:
        return statistics.median(b.get(key, 0.0) for b in progress) / 1000.0 if progress else 0.0

    parts = {  # JSON name: (label, seconds); indented labels are parts of the line above them
        "batch": ("whole batch (Spark's triggerExecution)", spark_part("triggerExecution")),
        "planning": (
            "  planning (latestOffset, getBatch, queryPlanning)",
            spark_part("latestOffset") + spark_part("getBatch") + spark_part("queryPlanning"),
        ),
        "offset_log": ("  Spark's offset log (walCommit)", spark_part("walCommit")),
        "spark_job": ("  the batch's Spark job (addBatch)", spark_part("addBatch")),
        "log_read": ("    log read, slowest task", ours("read_s", "max")),
        "processing": ("    processing, slowest task", ours("process_s", "max")),
        "sink_commit": ("    sink commit (Delta, exactly once)", ours("sink_commit_s")),
        "control_commit": ("    checkpoints, store checkpoints, input lag (control plane)", ours("control_commit_s")),
        "rest": ("    the rest: task launch, Python workers, parquet write, metrics commit", 0.0),
        "commit_log": ("  Spark's commit log (commitOffsets)", spark_part("commitOffsets")),
    }
    known = sum(parts[k][1] for k in ("log_read", "processing", "sink_commit", "control_commit"))
    parts["rest"] = (parts["rest"][0], max(parts["spark_job"][1] - known, 0.0))
    return {"batches": len(progress), "batch_s": parts["batch"][1], "parts": parts}


def summary(by: dict[tuple[str, int], Run], top: int) -> dict[str, float | int | None]:
    """The issue's figures under stable names, so a script can compare runs (None: not measured this run)."""

    def ratio(a: Run | None, b: Run | None) -> float | None:
        return round(a.rate / b.rate, 3) if a and b and b.rate else None

    amplified = by.get(("elastic lat=0", top)) or by.get(("elastic", top))
    return {
        "fetch_amplification_f8": round(amplified.fetched / amplified.needed, 3)
        if amplified and amplified.needed
        else None,
        "speedup_f8_vs_f1": ratio(by.get(("elastic", top)), by.get(("elastic", 1))),
        "cheap_f1_vs_ranges": ratio(by.get(("elastic lat=0", 1)), by.get(("ranges lat=0", 1))),
        "cheap_f8_vs_f1": ratio(by.get(("elastic lat=0", top)), by.get(("elastic lat=0", 1))),
        "batch_overhead_s": None,  # the fixed-cost run's (main), one definition only: not a trigger-time estimate
        "order_violations": sum(max(r.violations, 0) for (mode, _), r in by.items() if mode.startswith("elastic")),
        "top_factor": top,
    }


if __name__ == "__main__":
    sys.exit(main())
