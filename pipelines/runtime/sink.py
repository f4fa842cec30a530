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
running the query, so nothing here may rely on state between calls: the
handles kept at the bottom of this module are caches, caught up (or
reopened) before every use, never a source of truth.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pipelines.control.metrics import metric
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.metric_names import LAG
from pipelines.core.ssp import SystemStreamPartition
from pipelines.core.state import StateSpec
from pipelines.deltaio import open_table
from pipelines.errors import PipelinesError
from pipelines.faults import crash_point
from pipelines.runtime import fetch, heap, manifest, schemas
from pipelines.runtime.markers import TaskMarker
from pipelines.runtime.processing import make_processor
from pipelines.runtime.reading import read_described
from pipelines.storage.home import Home
from pipelines.storage.location import parse
from pipelines.storage.objects import store_for


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
        self.settings = json.loads(options.get("systems", "{}"))
        self.process = options["process"]
        self.process_options = json.loads(options.get("processOptions", "{}"))
        self.output_json = options["outputSchema"]
        self.stores = options.get("stores", "false") == "true"
        self.state = tuple(StateSpec.from_saved(raw) for raw in json.loads(options.get("state", "[]")))

    # ------------------------------------------------------------ executors

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BatchFiles:
        """One virtual task: its records read here (the source hands over its ``TaskRange`` only), the user's
        function over them, in order, then one parquet file per table."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "unknown"
        process = make_processor(
            self.job,
            self.process,
            self.process_options,
            self.output_json,
            home=self.home,
            stores=self.stores,
            state=self.state,
        )
        user_names = schemas.sink_schema(schemas.from_json(self.output_json)).names
        dead_names = [f.name for f in schemas.PROCESSED_LINEAGE]
        message = BatchFiles(query_id)
        data_writer = _FileWriter(self.sink_path)
        dead_writer = _FileWriter(self.dead_path)
        try:
            for batch in process(read_described(iterator)):
                kinds = batch.column("_kind")  # masks, not Python lists: a cheap job's batches hold 100,000 rows
                markers = pc.equal(kinds, schemas.MARKER)
                if pc.any(markers).as_py():
                    message.markers += batch.column("_marker").filter(markers).to_pylist()
                data_rows = pc.equal(kinds, schemas.DATA)
                dead_rows = pc.equal(kinds, schemas.DEAD)
                if pc.any(data_rows).as_py():
                    crash_point("mid_batch")
                    data_writer.write(batch.select(user_names).filter(data_rows))
                if pc.any(dead_rows).as_py():
                    rows = batch.filter(dead_rows)
                    dead = rows.select(dead_names)
                    dead = pa.RecordBatch.from_arrays(
                        [*dead.columns, rows.column("_value"), rows.column("_error")],
                        names=[*dead_names, "value", "error"],
                    )
                    dead_writer.write(dead)
        finally:
            message.data = data_writer.close()
            message.dead = dead_writer.close()
        heap.settle()  # not on the way out of a failure: Spark ends that worker, and its frames hold the batch
        return message

    # ------------------------------------------------------------ driver

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        present = [_batch_files(m) for m in messages if m is not None]
        if not present:
            return
        home = Home(self.home)
        app_id = f"{self.job}/v{self.version}/{present[0].query_id}"
        markers = [TaskMarker.loads(text) for m in present for text in m.markers]
        files: dict[str, Any] = {
            "dead": [f for m in present for f in m.dead],
            "data": [f for m in present for f in m.data],
            "state": {s.name: [f for mk in markers for f in mk.state_files.get(s.name, [])] for s in self.state},
        }
        tables = bool(files["dead"]) + bool(files["data"]) + sum(bool(v) for v in files["state"].values())
        named = bool(self.state) or tables > 1
        if named:  # several tables commit apart: the first run's files for all of them (runtime.manifest)
            wire = {**files, "dead": [asdict(f) for f in files["dead"]], "data": [asdict(f) for f in files["data"]]}
            settled, _ = manifest.settle(home, self.job, app_id, batchId, wire)
            files = {
                "dead": [FileAdd(**f) for f in settled["dead"]],
                "data": [FileAdd(**f) for f in settled["data"]],
                "state": settled["state"],
            }
        t0 = time.perf_counter()
        dead_files: list[FileAdd] = files["dead"]
        dead_new = commit_files(self.dead_path, dead_files, app_id, batchId) if dead_files else False
        data_new = commit_files(self.sink_path, files["data"], app_id, batchId)
        commit_s = time.perf_counter() - t0
        crash_point("after_sink_commit")
        state_figures = {}
        if self.state:
            from pipelines.state.durable import ChangeFile
            from pipelines.state.runtime import commit_states

            planned = next((mk.state for mk in markers if mk.state is not None), None)
            changes = {name: [ChangeFile.from_json(f) for f in found] for name, found in files["state"].items()}
            state_figures = commit_states(home, self.job, self.state, changes, planned, app_id=app_id, batch_id=batchId)
            crash_point("after_state_commit")
        t1 = time.perf_counter()  # control_commit_s: checkpoints, store checkpoints, input lag (not this append)
        control = _control(home)
        checkpoints = CheckpointMap(
            self.factor, {SystemStreamPartition.from_wire(ssp): end for mk in markers for ssp, end in mk.ends.items()}
        )
        if checkpoints.offsets:
            control.checkpoints.write(self.job, self.version, checkpoints, batchId)
        from pipelines.adjunct.runtime import commit_store_checkpoints

        stores = next((mk.stores for mk in markers if mk.stores is not None), None)
        try:  # adjunct stores: the versions the batch saw (a store's own Delta state stays its truth)
            commit_store_checkpoints(home, self.job, self.version, batchId, stores)
        except (PipelinesError, OSError) as e:
            print(f"[{self.job}] store checkpoints of batch {batchId} not written: {e}", flush=True)
        rows = _task_metrics(markers, self.job, self.version, batchId)
        rows += _partition_metrics(home, self.settings, checkpoints, self.job, self.version, batchId)
        needed = sum(mk.records_in for mk in markers)
        for name, value in (  # per-batch figures; records_fetched and bytes_fetched are per task (sum them)
            ("task_count", self.task_count),
            ("sink_commit_s", commit_s),
            ("batch_replayed", 0.0 if data_new or dead_new or not (needed or dead_files) else 1.0),
        ):
            rows.append(metric(self.job, self.version, batchId, None, name, value))
        for name, value in state_figures.items():
            rows.append(metric(self.job, self.version, batchId, None, name, value))
        rows.append(metric(self.job, self.version, batchId, None, "control_commit_s", time.perf_counter() - t1))
        control.metrics.append(rows)
        fetch.remove_stages(home, [stage for mk in markers for stage in mk.stages])
        if named:
            manifest.remove(home, self.job, app_id, batchId)
        heap.settle()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Uncommitted files are invisible to Delta readers; leave them for vacuum rather than guess."""


def _batch_files(message: WriterCommitMessage) -> BatchFiles:
    """A task's message, as ``write`` made it (Spark hands the driver back what the tasks returned)."""
    if not isinstance(message, BatchFiles):
        raise TypeError(f"expected the BatchFiles of a task, got {type(message).__name__}")
    return message


class _FileWriter:
    """One parquet file per task and table, opened on the first row, written through the home's store."""

    def __init__(self, table_path: str) -> None:
        self.root = parse(table_path, what="a sink table")
        self.store = store_for(self.root)
        self.writer: pq.ParquetWriter | None = None
        self.stream: Any = None
        self.rel = ""
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if self.writer is None:
            self.rel = f"part-{uuid.uuid4().hex}.parquet"
            self.stream = self.store.filesystem().open_output_stream(self.store.arrow_path(self.root / self.rel))
            self.writer = pq.ParquetWriter(self.stream, batch.schema)
        self.writer.write_batch(batch)
        self.rows += batch.num_rows

    def close(self) -> list[FileAdd]:
        if self.writer is None:
            return []
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()  # on S3 the object exists from here on
        return [FileAdd(self.rel, size, self.rows)]


def commit_files(table_path: str, files: list[FileAdd], app_id: str, batch_id: int) -> bool:
    """Add files to a Delta table once per (app id, batch); False if this batch was committed before."""
    from deltalake import CommitProperties, Transaction
    from deltalake.transaction import AddAction

    table = _table(table_path)
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


def _task_metrics(markers: list[TaskMarker], job: str, version: int, batch_id: int) -> list[dict[str, Any]]:
    rows = []
    for mk in markers:
        for name in ("records_in", "keys_in", "records_fetched", "bytes_fetched", "records_out", "dead_letters"):
            rows.append(metric(job, version, batch_id, mk.task, name, getattr(mk, name)))
        for name in ("read_ns", "key_hash_ns", "wait_ns", "process_ns"):
            rows.append(metric(job, version, batch_id, mk.task, name.replace("_ns", "_s"), getattr(mk, name) / 1e9))
        for name, value in mk.stats.items():
            rows.append(metric(job, version, batch_id, mk.task, f"input.{name}", value))
        for name, value in mk.state_stats.items():
            rows.append(metric(job, version, batch_id, mk.task, name, value))
    return rows


def _partition_metrics(
    home: Home, settings: dict[str, Any], checkpoints: CheckpointMap, job: str, version: int, batch_id: int
) -> list[dict[str, Any]]:
    """Per partition: records behind its end now (where the system can count), keyed by the SSP's wire form.

    Also tells each input system how far the job has committed (Kafka: the
    job's consumer group), so the system's own tools show the job's lag.
    """
    rows: list[dict[str, Any]] = []
    systems = _systems(home, settings)
    floors = systems.floors(checkpoints.offsets.items())
    by_stream: dict[tuple[str, str], dict[int, str]] = {}
    for ssp, position in floors.items():
        by_stream.setdefault((ssp.system, ssp.stream), {})[ssp.partition] = position
    for (system_name, stream), positions in sorted(by_stream.items()):
        system = systems.of(system_name)
        try:
            ends = system.end_positions(stream)
            for p, position in sorted(positions.items()):
                behind = system.records_between(stream, p, position, ends[p]) if p in ends else None
                if behind is not None:
                    ssp = SystemStreamPartition(system_name, stream, p).wire()
                    rows.append(metric(job, version, batch_id, ssp, LAG, behind))
            system.acknowledge(job, stream, positions)
        except PipelinesError as e:  # metrics and acknowledgements are reports: never a reason to fail a batch
            rows.append(metric(job, version, batch_id, f"{system_name}/{stream}", "input_unavailable", 1.0))
            print(f"[{job}] input {system_name}/{stream} did not answer after batch {batch_id}: {e}", flush=True)
    return rows


# A commit runs in a Python worker that Spark reuses across batches: keep the Delta and input-system handles,
# so a batch does not replay table logs or reconnect to brokers from scratch.
_CONTROL: dict[str, Any] = {}
_SYSTEMS: dict[tuple[str, str], Any] = {}


_TABLES: dict[str, tuple[str | None, Any]] = {}


def _table(path: str) -> Any:
    """The sink table at its latest version: opening it afresh replays up to 99 commits (7 ms at 10, 33 ms at
    60 since the last Delta checkpoint), catching a kept handle up reads only the commits since (4 ms).

    A kept handle is used only while the table's first commit is the one it was opened on: a table deleted
    and made again at the same path starts a new log, which a stale handle would not see, and its app ids
    would make a new batch look committed. The first commit's identity is its content (its commitInfo holds
    the creation time in milliseconds and the table's id, a random UUID), read once per check: the same bytes on
    a local disk and on S3. Once Delta's log cleanup removed that commit, after 30 days, the table is opened
    afresh each time: slower, never wrong.
    """
    loc = parse(path, what="a sink table")
    try:
        first = store_for(loc).read(loc / "_delta_log" / f"{0:020d}.json")
        identity: str | None = hashlib.sha256(first).hexdigest()
    except OSError:
        identity = None
    kept = _TABLES.get(path)
    if kept is not None and identity is not None and kept[0] == identity:
        kept[1].update_incremental()
        return kept[1]
    table = open_table(loc)
    _TABLES[path] = (identity, table)
    return table


def _control(home: Home) -> Any:
    from pipelines.control import ControlPlane

    key = str(home.root)
    if key not in _CONTROL:
        _CONTROL[key] = ControlPlane(home)
    return _CONTROL[key]


def _systems(home: Home, settings: dict[str, Any]) -> Any:
    from pipelines.systems.registry import JobSystems

    key = (str(home.root), json.dumps(settings, sort_keys=True, default=str))
    if key not in _SYSTEMS:
        _SYSTEMS[key] = JobSystems(home, settings)
    return _SYSTEMS[key]
