"""Benchmark of a control table as a job ages: reads and appends after many batches, before and after compaction.

    python -m benchmarks.bench_control [--batches 2000] [--buckets 4] [--samples 10] [--metric-batches 200000]
                                       [--store-batches 100000]

What runs: one job's checkpoints table on local disk, written as a driver writes it (one commit of ``--buckets``
rows per batch, a start row under an application transaction every 100 batches). At a few points of its life
(10 %, 50 % and 100 % of ``--batches``) it measures what a driver and the scaling steps pay:

* **first read**: a fresh process's view (a new ``ControlPlane``) opening the table and reading the job's
  latest checkpoints: what a driver's start, a rescale's migration and every Airflow task pay;
* **read**: the same read again on the same handle after one more commit (the table refreshed incrementally);
* **append**: one batch's commit.

Then it measures the same three at the same age on two copies of the aged table: one with its files compacted
only (Delta's optimize), one compacted as a driver's heartbeat does every 10 minutes (``control.compaction``:
superseded rows deleted, then the files compacted). The baseline is the aged table itself, in the same run.

Figures (the last line, JSON): the medians before, after the files-only compaction and after the driver's compaction
at ``--batches``, in ms, and ``first_read_before_vs_after``, ``read_files_only_vs_after`` (what pruning the rows adds
to compacting the files), ``append_before_vs_after`` (ratios: above 1, the compaction saves).

Second part, the metrics table: one model version's metric rows after ``--metric-batches`` batches (12 rows a batch,
as a factor-4 job's sink writes them; the files as a driver's compaction leaves them), read as the autosizer reads
its batch rows: the whole version (what it read before) against the rows of its 300 s window (what it reads now).
Figures ``autosize_read_whole_ms``, ``autosize_read_window_ms`` and ``autosize_read_whole_vs_window``.

Third part, the store checkpoints: a store with two partitions after ``--store-batches`` batches (a row per partition
per batch), read as a driver's start reads them (``read_store_checkpoints``), before and after the compaction's
deletion of the rows no start can pick (``prune_store_checkpoints``). Figures ``store_read_before_ms``,
``store_read_after_ms`` and ``store_read_before_vs_after``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from benchmarks.bench_runtime import log, table
from pipelines.adjunct.checkpoints import read_store_checkpoints
from pipelines.cli.table import count
from pipelines.control import ControlPlane
from pipelines.control.checkpoints import Checkpoints
from pipelines.control.compaction import TARGET_BYTES, compact_job, summary
from pipelines.control.metrics import METRICS
from pipelines.control.store_checkpoints import STORE_CHECKPOINT_SCHEMA, prune_store_checkpoints
from pipelines.control.store_checkpoints import TABLE as STORE_TABLE
from pipelines.core.autosize import AutosizeConfig
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.ssp import SystemStreamPartition
from pipelines.deltaio import forget_parsed_files
from pipelines.operations.autosize import BATCH_METRICS, HEARTBEAT, QUERY_BOUNDARIES
from pipelines.storage.home import Home
from pipelines.usage import Parser

JOB = "aged"


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m benchmarks.bench_control", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=count(20), default=2000, help="batches the job has committed at the end")
    parser.add_argument("--buckets", type=count(1), default=4, help="checkpoint rows per batch")
    parser.add_argument("--samples", type=count(1), default=10, help="measurements per figure (the median is kept)")
    parser.add_argument(
        "--store-batches",
        type=count(1),
        default=100_000,
        help="batches of store checkpoint rows a driver's start reads",
    )
    parser.add_argument(
        "--metric-batches",
        type=count(1),
        default=200_000,
        help="batches of metric rows of the version the autosizer reads",
    )
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="bench-control-"))
    ssps = [SystemStreamPartition("deltalog", "events", 0, b) for b in range(args.buckets)]
    factor = args.buckets
    batch = -1

    def commit(home: Home) -> None:
        nonlocal batch
        batch += 1
        if home.root not in writers:  # one writer per table, as a driver keeps its handle
            writers[home.root] = ControlPlane(home).checkpoints
        writer = writers[home.root]
        writer.write(JOB, 1, CheckpointMap(factor, {s: str(batch * 10 + i) for i, s in enumerate(ssps)}), batch)
        if batch % 100 == 0:
            writer.write(JOB, 1, CheckpointMap(factor, dict.fromkeys(ssps, str(batch))), -1)

    def measure(label: str, home: Home) -> list[float]:
        nonlocal batch
        at = batch
        first = median(args.samples, lambda: ControlPlane(home).checkpoints.latest(JOB, 1))
        reader = ControlPlane(home).checkpoints
        reader.latest(JOB, 1)

        def read_after_commit() -> float:
            commit(home)
            started = time.perf_counter()
            reader.latest(JOB, 1)
            return time.perf_counter() - started

        read = statistics.median(read_after_commit() for _ in range(args.samples)) * 1000
        append = median(args.samples, lambda: commit(home))
        batch = at  # the next state is measured at the same age
        log(f"{label}: first read {first:.1f} ms, read {read:.1f} ms, append {append:.1f} ms")
        return [first, read, append]

    writers: dict[Path, Checkpoints] = {}
    aged = Home(root / "aged")
    ControlPlane(aged).checkpoints.write(JOB, 1, CheckpointMap(factor, dict.fromkeys(ssps, "0")), -1)
    rows: list[tuple[str, list[float]]] = []
    began = time.monotonic()
    for share in (0.1, 0.5, 1.0):
        target = int(args.batches * share)
        while batch + 1 < target:
            commit(aged)
            if (batch + 1) % max(1, args.batches // 10) == 0:
                log(f"{batch + 1} of {args.batches} batches written ({time.monotonic() - began:.0f} s)")
        if share == 1.0:  # two copies of the aged table: one with its files compacted only, one compacted and pruned
            answer = ControlPlane(aged).checkpoints.latest(JOB, 1)
            shutil.copytree(aged.root, root / "files-only")
            shutil.copytree(aged.root, root / "pruned")
        rows.append((f"{batch + 1} batches", measure(f"{batch + 1} batches", aged)))
    files_only, pruned = Home(root / "files-only"), Home(root / "pruned")
    DeltaTable(str(files_only.control_table("checkpoints"))).optimize.compact(target_size=TARGET_BYTES)
    done = compact_job(pruned, JOB, min_files=2)
    for home in (files_only, pruned):
        if ControlPlane(home).checkpoints.latest(JOB, 1) != answer:
            raise SystemExit(f"error: the table in {home.root.name} answers differently: rows were lost or reordered")
    log("compacted: " + summary(done))
    rows.append((f"{batch + 1} batches, files compacted", measure("files compacted", files_only)))
    rows.append((f"{batch + 1} batches, compacted and pruned", measure("compacted and pruned", pruned)))

    print(
        table(
            [[name, *(f"{v:.1f}" for v in values)] for name, values in rows],
            ["table's age", "first read ms", "read ms", "append ms"],
        )
    )
    before, files, after = rows[-3][1], rows[-2][1], rows[-1][1]
    figures = {
        "batches": args.batches,
        "first_read_before_ms": round(before[0], 1),
        "first_read_files_only_ms": round(files[0], 1),
        "first_read_after_ms": round(after[0], 1),
        "read_before_ms": round(before[1], 1),
        "read_files_only_ms": round(files[1], 1),
        "read_after_ms": round(after[1], 1),
        "append_before_ms": round(before[2], 1),
        "append_after_ms": round(after[2], 1),
        "first_read_before_vs_after": round(before[0] / after[0], 2),
        "read_files_only_vs_after": round(files[1] / after[1], 2),
        "append_before_vs_after": round(before[2] / after[2], 2),
    }
    figures |= metrics_reads(root, args.metric_batches, args.samples)
    figures |= store_checkpoint_reads(root, args.store_batches, args.samples)
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"bench": "control", "figures": figures}))


METRIC_NAMES = ("task_count", "sink_commit_s", "input_records", "control_commit_s") + ("process_s", "records_in") * 4
"""A batch's metric rows as a factor-4 job's sink writes them (four tasks' rows, the batch's own)."""


def metrics_reads(root: Path, batches: int, samples: int) -> dict[str, float]:
    """The autosizer's read of a version's batch rows after ``batches`` batches: the whole version (before) or
    its window (now); the table is as a driver's compaction leaves it (files of up to 1 MiB, in commit order)."""
    home = Home(root / "metrics")
    began = datetime(2026, 11, 27, tzinfo=UTC)
    path = str(home.control_table("metrics"))
    for first in range(0, batches, 10_000):
        ids = range(first, min(batches, first + 10_000))
        n = len(METRIC_NAMES)
        rows = {
            "job": [JOB] * (len(ids) * n),
            "model_version": [1] * (len(ids) * n),
            "batch_id": [b for b in ids for _ in METRIC_NAMES],
            "task": [f"Partition {i % 4}" if i >= 4 else None for _ in ids for i in range(n)],
            "metric": [m for _ in ids for m in METRIC_NAMES],
            "value": [float(b) for b in ids for _ in METRIC_NAMES],
            "at": [began + timedelta(seconds=b) for b in ids for _ in METRIC_NAMES],
        }
        data = pa.Table.from_pydict(rows, schema=METRICS.schema)
        write_deltalake(path, data, mode="append", partition_by=["job"], target_file_size=TARGET_BYTES)
        log(f"metrics: {ids.stop:,} of {batches:,} batches written")
    now = began + timedelta(seconds=batches)
    names = [*BATCH_METRICS, *QUERY_BOUNDARIES, HEARTBEAT]
    window = now - timedelta(seconds=AutosizeConfig().window_s)

    def read(since: datetime | None) -> None:
        forget_parsed_files()  # an evaluation is an Airflow task: a fresh process, nothing parsed yet
        ControlPlane(home).metrics.read(JOB, model_version=1, metrics=names, since=since)

    whole, windowed = median(samples, lambda: read(None)), median(samples, lambda: read(window))
    print(
        table(
            [[f"{batches:,} batches", f"{whole:.1f}", f"{windowed:.1f}"]],
            ["version's age", "whole version ms (before)", "window ms (now)"],
        )
    )
    return {
        "metric_batches": batches,
        "autosize_read_whole_ms": round(whole, 1),
        "autosize_read_window_ms": round(windowed, 1),
        "autosize_read_whole_vs_window": round(whole / windowed, 2),
    }


def median(samples: int, work: Callable[[], object]) -> float:
    """The median wall time of ``work`` over ``samples`` runs, in ms."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def store_checkpoint_reads(root: Path, batches: int, samples: int) -> dict[str, float]:
    """A driver's start reading its stores' checkpoints (``read_store_checkpoints``) after ``batches`` batches of a
    store with two partitions, before and after the compaction's deletion of the rows no start can pick."""
    home = Home(root / "stores")
    path = str(home.control_table(STORE_TABLE))
    began = datetime(2026, 11, 27, tzinfo=UTC)
    for first in range(0, batches, 20_000):
        ids = range(first, min(batches, first + 20_000))
        rows = [
            {"job": JOB, "store": "customers", "system": "deltalog", "stream": "customers", "partition": p}
            | {"position": str(b), "seq": b // 10, "generation": 0, "incarnation": "i1", "batch_id": b}
            | {"written_at": began + timedelta(seconds=b)}
            for b in ids
            for p in range(2)
        ]
        data = pa.Table.from_pylist(rows, schema=STORE_CHECKPOINT_SCHEMA)
        write_deltalake(path, data, mode="append", partition_by=["job"], target_file_size=TARGET_BYTES)
        log(f"store checkpoints: {ids.stop:,} of {batches:,} batches written")

    def read() -> None:
        forget_parsed_files()  # a driver's start: a fresh process
        read_store_checkpoints(home, JOB)

    answer = read_store_checkpoints(home, JOB)
    before = median(samples, read)
    deleted = prune_store_checkpoints(DeltaTable(path), JOB)
    if read_store_checkpoints(home, JOB) != answer:
        raise SystemExit("error: the store checkpoints answer differently after the deletion")
    after = median(samples, read)
    print(
        table(
            [[f"{batches:,} batches", f"{before:.1f}", f"{after:.1f}", f"{deleted:,}"]],
            ["store's age", "start's read ms (before)", "after deletion ms", "rows deleted"],
        )
    )
    return {
        "store_batches": batches,
        "store_read_before_ms": round(before, 1),
        "store_read_after_ms": round(after, 1),
        "store_read_before_vs_after": round(before / after, 2),
    }


if __name__ == "__main__":
    main()
