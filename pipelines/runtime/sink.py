"""The exactly-once Delta sink, and where checkpoints are written.

Executors write parquet files straight into the sink and dead-letter tables'
folders (``write``); the driver-side commit (``commit``) adds them to each
table in one Delta transaction carrying the application transaction
``(app_id, batch id)``, where the app id names the job, the model version and
Spark's query id. Spark replays a batch whose commit it did not record with the
same batch id and offsets, and delta-rs does not enforce app ids, so the commit
checks the table's recorded version for the app id itself and skips a batch it
already has: nothing is written twice. Only after the sink commit are the
batch's end offsets appended to the checkpoints table (and its metrics to the
metrics table); a crash in between re-runs the batch, finds it committed, and
appends the checkpoints then.

Spark creates a fresh writer for every commit in another process than the one
running the query, so nothing here may rely on state between calls.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pipelines.runtime import schemas

FAULT_ENV = "PIPELINES_FAULT"  # test hook: "after_sink_commit" crashes the commit between sink and checkpoints


@dataclass
class FileAdd:
    path: str  # relative to the table root
    size: int
    rows: int


@dataclass
class BatchFiles(WriterCommitMessage):
    query_id: str
    data: list[FileAdd] = field(default_factory=list)
    dead: list[FileAdd] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)


class ElasticDeltaSink(DataSource):
    """``df.writeStream.format("elastic_delta").option("sinkPath", ...).option("deadLetterPath", ...)...``."""

    @classmethod
    def name(cls) -> str:
        return "elastic_delta"

    def streamWriter(self, schema: StructType, overwrite: bool) -> ElasticDeltaWriter:
        return ElasticDeltaWriter(schema, self.options)


class ElasticDeltaWriter(DataSourceStreamArrowWriter):
    def __init__(self, schema: StructType, options: Any) -> None:
        self.schema = schema
        self.home = options["home"]
        self.job = options["job"]
        self.version = int(options["modelVersion"])
        self.factor = int(options["factor"])
        self.sink_path = options["sinkPath"]
        self.dead_path = options["deadLetterPath"]
        self.task_count = int(options.get("taskCount", "0"))

    # ------------------------------------------------------------ executors

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BatchFiles:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "unknown"
        user_names = [f.name for f in self.schema.fields if f.name not in _ROW_KIND_NAMES]
        dead_names = [f.name for f in schemas.PROCESSED_LINEAGE]
        message = BatchFiles(query_id)
        data_writer = _FileWriter(self.sink_path)
        dead_writer = _FileWriter(self.dead_path)
        try:
            for batch in iterator:
                kinds = batch.column("_kind").to_pylist()
                if schemas.MARKER in kinds:
                    message.markers += [
                        m
                        for m, k in zip(batch.column("_marker").to_pylist(), kinds, strict=True)
                        if k == schemas.MARKER
                    ]
                data_rows = [i for i, k in enumerate(kinds) if k == schemas.DATA]
                dead_rows = [i for i, k in enumerate(kinds) if k == schemas.DEAD]
                if data_rows:
                    data_writer.write(batch.select(user_names).take(pa.array(data_rows, pa.int64())))
                if dead_rows:
                    rows = batch.take(pa.array(dead_rows, pa.int64()))
                    dead = rows.select(dead_names)
                    dead = pa.RecordBatch.from_arrays(
                        [*dead.columns, rows.column("_value"), rows.column("_error")],
                        names=[*dead_names, "value", "error"],
                    )
                    dead_writer.write(dead)
        finally:
            message.data = data_writer.close()
            message.dead = dead_writer.close()
        return message

    # ------------------------------------------------------------ driver

    def commit(self, messages: list[BatchFiles | None], batchId: int) -> None:
        from pipelines.control import ControlPlane
        from pipelines.control.home import Home

        present = [m for m in messages if m is not None]
        if not present:
            return
        app_id = f"{self.job}/v{self.version}/{present[0].query_id}"
        t0 = time.perf_counter()
        dead_new = commit_files(self.dead_path, [f for m in present for f in m.dead], app_id, batchId)
        data_new = commit_files(self.sink_path, [f for m in present for f in m.data], app_id, batchId)
        commit_s = time.perf_counter() - t0
        if os.environ.get(FAULT_ENV) == "after_sink_commit":
            os._exit(137)  # simulate a crash between the sink commit and the checkpoint append
        control = ControlPlane(Home(Path(self.home)))
        checkpoints, metrics = _from_markers(present, self.job, self.version, self.factor, batchId)
        if checkpoints.offsets:
            control.checkpoints.write(self.job, self.version, checkpoints, batchId)
        metrics += _lag(Home(Path(self.home)), checkpoints, self.job, self.version, batchId)
        metrics.append(_metric(self.job, self.version, batchId, None, "task_count", self.task_count))
        metrics.append(_metric(self.job, self.version, batchId, None, "sink_commit_s", commit_s))
        metrics.append(
            _metric(self.job, self.version, batchId, None, "batch_replayed", 0.0 if data_new or dead_new else 1.0)
        )
        control.metrics.append(metrics)

    def abort(self, messages: list[BatchFiles | None], batchId: int) -> None:
        """Uncommitted files are invisible to Delta readers; leave them for vacuum rather than guess."""


_ROW_KIND_NAMES = {f.name for f in schemas.ROW_KIND}


class _FileWriter:
    """One parquet file per task and table, opened on the first row."""

    def __init__(self, table_path: str) -> None:
        self.root = Path(table_path)
        self.writer: pq.ParquetWriter | None = None
        self.rel = ""
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if self.writer is None:
            self.rel = f"part-{uuid.uuid4().hex}.parquet"
            self.writer = pq.ParquetWriter(self.root / self.rel, batch.schema)
        self.writer.write_batch(batch)
        self.rows += batch.num_rows

    def close(self) -> list[FileAdd]:
        if self.writer is None:
            return []
        self.writer.close()
        return [FileAdd(self.rel, (self.root / self.rel).stat().st_size, self.rows)]


def commit_files(table_path: str, files: list[FileAdd], app_id: str, batch_id: int) -> bool:
    """Add files to a Delta table once per (app id, batch); False if this batch was committed before."""
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.transaction import AddAction

    table = DeltaTable(table_path)
    done = table.transaction_version(app_id)
    if done is not None and done >= batch_id:
        return False
    if not files:
        return True
    now = int(time.time() * 1000)
    adds = [
        AddAction(
            path=f.path,
            size=f.size,
            partition_values={},
            modification_time=now,
            data_change=True,
            stats=json.dumps({"numRecords": f.rows}),
        )
        for f in files
    ]
    table.create_write_transaction(
        adds,
        "append",
        table.schema(),
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id=app_id, version=batch_id)],
            custom_metadata={"pipelines.batch": str(batch_id)},
        ),
    )
    return True


def _from_markers(messages: list[BatchFiles], job: str, version: int, factor: int, batch_id: int) -> tuple[Any, list]:
    from pipelines.core.checkpoints import CheckpointMap
    from pipelines.core.ssp import SystemStreamPartition

    offsets: dict[SystemStreamPartition, str] = {}
    metrics: list[dict[str, Any]] = []
    for text in (m for msg in messages for m in msg.markers):
        marker = json.loads(text)
        for system, stream, partition, bucket, end in marker["ends"]:
            offsets[SystemStreamPartition(system, stream, partition, None if bucket < 0 else bucket)] = end
        task = marker["task"]
        for name in ("records_in", "records_fetched", "records_out", "dead_letters"):
            metrics.append(_metric(job, version, batch_id, task, name, marker.get(name, 0)))
        for name in ("read_ns", "key_hash_ns", "process_ns"):
            metrics.append(_metric(job, version, batch_id, task, name.replace("_ns", "_s"), marker.get(name, 0) / 1e9))
    return CheckpointMap(factor, offsets), metrics


def _lag(home: Any, checkpoints: Any, job: str, version: int, batch_id: int) -> list[dict[str, Any]]:
    """Records behind per partition (its end offset minus its slowest bucket's checkpoint), keyed by SSP."""
    from pipelines.systems.registry import open_system

    low: dict[tuple[str, str, int], int] = {}
    for ssp, offset in checkpoints.offsets.items():
        key = (ssp.system, ssp.stream, ssp.partition)
        low[key] = min(low.get(key, int(offset)), int(offset))
    rows = []
    for system, stream in sorted({(s, st) for s, st, _ in low}):
        ends = open_system(system, home).end_offsets(stream)
        for (s, st, p), committed in sorted(low.items()):
            if (s, st) == (system, stream):
                rows.append(_metric(job, version, batch_id, f"[{s}, {st}, {p}]", "lag_records", ends[p] - committed))
    return rows


def _metric(job: str, version: int, batch_id: int, task: str | None, name: str, value: float) -> dict[str, Any]:
    return {
        "job": job,
        "model_version": version,
        "batch_id": batch_id,
        "task": task,
        "metric": name,
        "value": float(value),
    }
