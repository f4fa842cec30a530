"""The processing step: the user's function over one virtual task's records, in order, with lineage.

It runs inside the sink's ``write`` (``sink.py``), over the Arrow batches of
one Spark partition, which is one virtual task: its records stay in one Python
worker in offset order, and the rows it makes go straight to parquet without
crossing back into the JVM. Rows leave tagged with their kind: ``data`` (the user's output
with lineage), ``dead`` (a record the function raised on, with the error) or
``marker`` (the task's end offsets and counters, passed on to the sink).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa

from pipelines.core.state import StateColumn, StateError, StateSpec, StateValueError, column_checker
from pipelines.faults import crash_point
from pipelines.jobs.process import Record, TaskContext, is_per_record, load_process_function, records
from pipelines.runtime import schemas
from pipelines.runtime.markers import TaskMarker

_FUNCTIONS: dict[str, Any] = {}


def make_processor(
    job: str,
    process_path: str,
    options: Mapping[str, Any],
    output_json: str,
    *,
    home: str | None = None,
    stores: bool = False,
    state: Sequence[StateSpec] = (),
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A job's processing step, Arrow batches in and out; everything it captures is plain data.

    ``stores``: the job has adjunct stores, opened for each task at its batch's versions (needs ``home``).
    ``state``: the job's keyed states, opened for each task at its batch's segments (needs ``home``); each call
    of the function is then a transaction of its key's state (``pipelines.state.task``).
    """
    options = dict(options)
    specs = tuple(state)

    def process_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        output = schemas.from_json(output_json)
        out_schema = schemas.arrow(schemas.processed_schema(output))
        user_schema = schemas.arrow(output)
        fn = _FUNCTIONS.get(process_path) or _FUNCTIONS.setdefault(process_path, load_process_function(process_path))
        batch_id = _batch_id()
        state = _TaskState()
        keyed: _Keyed | None = None
        for incoming in batches:
            # Spark re-chunks Arrow batches, so a task's marker row may share a batch with its last records.
            for batch, is_marker in _split_markers(incoming):
                if is_marker:
                    if keyed is not None:
                        keyed.finish(state)
                    yield _marker_row(batch, state, batch_id, out_schema)
                    continue
                version, task = batch.column("model_version")[0].as_py(), batch.column("virtual_task")[0].as_py()
                if specs and keyed is None:
                    keyed = _Keyed.open(home, job, specs, version, task, batch_id, batch, output)
                if keyed is not None:
                    batch = keyed.unapplied(batch, state)
                    if batch.num_rows == 0:
                        continue
                views: Mapping[str, Any] = {}
                if stores and home is not None:
                    from pipelines.adjunct.runtime import task_views

                    views = task_views(home, job, version, batch_id, task, batch)
                states = keyed.api if keyed is not None else _no_states(job)
                ctx = TaskContext(job, version, task, options, views, states)
                t0 = time.perf_counter_ns()
                found = keyed.run(fn, batch, ctx) if keyed is not None else _run(fn, batch, ctx, user_schema)
                rows, dead, user = _conform(*found, user_schema)
                state.process_ns += time.perf_counter_ns() - t0
                state.records_in += batch.num_rows
                state.records_out += len(rows)
                state.dead += len(dead)
                if rows or dead:
                    yield _assemble(batch, rows, dead, user, out_schema, batch_id, state)

    return process_partition


def _split_markers(batch: pa.RecordBatch) -> Iterator[tuple[pa.RecordBatch, bool]]:
    """Runs of record rows and single marker rows, in order."""
    if batch.num_rows == 0:
        return
    markers = batch.column("marker")
    if markers.null_count == batch.num_rows:
        yield batch, False
        return
    start = 0
    for i, is_null in enumerate(markers.is_null().to_pylist()):
        if not is_null:
            if i > start:
                yield batch.slice(start, i - start), False
            yield batch.slice(i, 1), True
            start = i + 1
    if start < batch.num_rows:
        yield batch.slice(start, batch.num_rows - start), False


class _TaskState:
    def __init__(self) -> None:
        self.seq = 0
        self.records_in = self.records_out = self.dead = self.process_ns = 0
        self.state_files: dict[str, list[dict[str, Any]]] = {}
        self.state_stats: dict[str, float] = {}


class _Keyed:
    """One task's keyed state in the processing step: its states at the batch's segments, and each call of the
    function run as a transaction of them (``pipelines.state.task``).

    A task of a batch whose states already committed (a replay after the driver died between its commits) runs
    no function: the sink's commit takes that batch's outputs from its manifest (``runtime.manifest``).
    """

    def __init__(self, states: Any, replayed: bool, orders: dict[str, Any], output: Any) -> None:
        self.states, self.replayed, self.orders = states, replayed, orders
        self.api = states.api
        self.fits = _output_check(output)

    @classmethod
    def open(
        cls,
        home: str | None,
        job: str,
        specs: Sequence[StateSpec],
        version: int,
        task: str,
        batch_id: int,
        batch: pa.RecordBatch,
        output: Any,
    ) -> _Keyed:
        from pipelines.runtime.reading import record_order, task_range
        from pipelines.state.runtime import already_committed, open_task
        from pipelines.storage.home import Home

        described = task_range(task)
        if home is None or described is None or described.state is None:
            raise StateError(
                f"job {job} v{version}: task {task} came with no state segments; its driver predates the job's state, "
                "or the task was not planned by the elastic source"
            )
        bucket = batch.column("key_bucket")[0].as_py()
        states = open_task(
            Home(home),
            job,
            specs,
            described.state,
            factor=described.factor,
            bucket=0 if bucket is None else int(bucket),
            model_version=version,
            batch_id=batch_id,
        )
        replayed = already_committed(Home(home), job, specs, _app_id(job, version), batch_id)
        streams = {_stream_of(r.ssp): _system_of(r.ssp) for r in described.ranges}
        orders = {stream: record_order(described, system) for stream, system in streams.items()}
        return cls(states, replayed, orders, output)

    def unapplied(self, batch: pa.RecordBatch, counts: _TaskState) -> pa.RecordBatch:
        """The records not applied to their keys' states yet (none, in a replay of a committed batch)."""
        if self.replayed:
            counts.state_stats["state_replay_skipped"] = (
                counts.state_stats.get("state_replay_skipped", 0) + batch.num_rows
            )
            return batch.slice(0, 0)
        keys = batch.column("key").to_pylist()
        self.states.load(keys)
        streams, partitions, offsets = (batch.column(n).to_pylist() for n in ("stream", "partition", "offset"))
        keep = [
            not self.states.applied_before(k, s, p, o, self.orders[s])
            for k, s, p, o in zip(keys, streams, partitions, offsets, strict=True)
        ]
        if all(keep):
            return batch
        skipped = len(keep) - sum(keep)
        counts.state_stats["state_applied_skipped"] = counts.state_stats.get("state_applied_skipped", 0) + skipped
        return batch.filter(pa.array(keep, pa.bool_()))

    def run(
        self, fn: Any, batch: pa.RecordBatch, ctx: TaskContext
    ) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
        """The function over the task's records, each call a transaction of the states (module docstring)."""
        streams, partitions, offsets, keys = (
            batch.column(n).to_pylist() for n in ("stream", "partition", "offset", "key")
        )
        lineage = list(zip(keys, streams, partitions, offsets, strict=True))
        if is_per_record(fn):
            return self._per_record(fn, batch, ctx, lineage)
        self.states.begin()
        try:
            result = fn(pa.Table.from_batches([batch]).drop_columns(["marker"]), ctx)
            rows = _rows_from_table(result, batch)
            for _, row in rows:
                self.fits(row)
        except Exception:
            self.states.rollback()
        else:
            self.states.commit(lineage)
            return rows, []
        rows = []
        dead: list[tuple[int, str]] = []
        for i in range(batch.num_rows):  # one bad record failed the whole call: find it, one record at a time
            one = batch.slice(i, 1)
            self.states.begin()
            try:
                result = fn(pa.Table.from_batches([one]).drop_columns(["marker"]), ctx)
                made = [(i, row) for _, row in _rows_from_table(result, one)]
                for _, row in made:
                    self.fits(row)
            except Exception as e:
                self.states.rollback()
                dead.append((i, _describe(e)))
                continue
            self.states.commit([lineage[i]])
            rows.extend(made)
        return rows, dead

    def _per_record(
        self, fn: Any, batch: pa.RecordBatch, ctx: TaskContext, lineage: list[tuple[Any, str, int, str]]
    ) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
        rows: list[tuple[int, dict[str, Any]]] = []
        dead: list[tuple[int, str]] = []
        states, fits = self.states, self.fits
        for i, record in enumerate(batch_records(batch)):
            states.begin()
            try:
                out = fn(record, ctx)
                made = [] if out is None else out if isinstance(out, list) else [out]
                for row in made:
                    if not isinstance(row, dict):
                        raise TypeError(f"process function returned {type(row).__name__}, expected dict")
                    fits(row)
            except Exception as e:
                states.rollback()
                dead.append((i, _describe(e)))
                continue
            states.commit([lineage[i]])
            rows.extend((i, row) for row in made)
        return rows, dead

    def finish(self, counts: _TaskState) -> None:
        """Write the task's state changes (one file per state) and say them in the marker."""
        files = self.states.finish()
        crash_point("mid_state_write")
        counts.state_files = {name: [f.to_json() for f in written] for name, written in files.items()}
        for name, stats in self.states.stats.items():
            read = stats.read
            for figure, value in (
                ("keys", stats.keys),
                ("rows_written", stats.rows_written),
                ("keys_looked_up", read.keys_looked_up),
                ("rows_found", read.rows_found),
                ("bytes_from_home", read.bytes_from_home),
                ("rows_from_home", read.rows_from_home),
                ("base_builds", read.base_builds),
            ):
                counts.state_stats[f"state.{name}.{figure}"] = float(value)


_NO_STATES: dict[str, Any] = {}


def _no_states(job: str) -> Any:
    """``ctx.state`` of a job without ``state:``: every use says the job declares none."""
    found = _NO_STATES.get(job)
    if found is None:
        from pipelines.state.task import NoStates

        found = _NO_STATES[job] = NoStates(job)
    return found


def _stream_of(ssp_wire: str) -> str:
    from pipelines.core.ssp import SystemStreamPartition

    return SystemStreamPartition.from_wire(ssp_wire).stream


def _system_of(ssp_wire: str) -> str:
    from pipelines.core.ssp import SystemStreamPartition

    return SystemStreamPartition.from_wire(ssp_wire).system


def _app_id(job: str, version: int) -> str:
    """The batch's exactly-once key, as the sink's commit names it (``sink.ElasticDeltaWriter.commit``)."""
    from pyspark import TaskContext as SparkTaskContext

    ctx = SparkTaskContext.get()
    query_id = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "unknown"
    return f"{job}/v{version}/{query_id}"


def _output_check(output: Any) -> Callable[[Mapping[str, Any]], None]:
    """A check that an output row fits the job's ``output_schema`` (unknown fields are ignored, as the sink does),
    made before a stateful call's writes become its task's: a row that does not fit makes its record a dead
    letter, and the state is then left as it was."""
    columns = [StateColumn(f.name, f.dataType.simpleString()) for f in output.fields]
    checks = [(c.name, column_checker("output_schema", c)) for c in columns]

    def fits(row: Mapping[str, Any]) -> None:
        try:
            for name, check in checks:
                value = row.get(name)
                if value is not None:
                    check(value)
        except StateValueError as e:
            raise ValueError(f"output row does not match output_schema: {e}") from None

    return fits


def _batch_id() -> int:
    from pyspark import TaskContext as SparkTaskContext

    ctx = SparkTaskContext.get()
    value = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    return int(value) if value is not None else -1


def _run(
    fn: Any, batch: pa.RecordBatch, ctx: TaskContext, user_schema: pa.Schema
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """(input row index, output row) pairs and (input row index, error) pairs, in input order."""
    if is_per_record(fn):
        return _run_per_record(fn, batch, ctx)
    try:
        result = fn(pa.Table.from_batches([batch]).drop_columns(["marker"]), ctx)
        return _rows_from_table(result, batch), []
    except Exception:
        rows: list[tuple[int, dict[str, Any]]] = []
        dead: list[tuple[int, str]] = []
        for i in range(batch.num_rows):
            one = batch.slice(i, 1)
            try:
                result = fn(pa.Table.from_batches([one]).drop_columns(["marker"]), ctx)
                rows.extend((i, row) for _, row in _rows_from_table(result, one))
            except Exception as e:
                dead.append((i, _describe(e)))
        return rows, dead


def _conform(
    rows: list[tuple[int, dict[str, Any]]], dead: list[tuple[int, str]], user_schema: pa.Schema
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]], pa.Table]:
    """The rows that fit the job's output_schema, as a table; rows that do not become dead letters.

    The table is built once, column by column, and ``_assemble`` reuses it:
    converting every row twice was a third of the step's time for a cheap job.
    """
    try:
        return rows, dead, _user_table(rows, user_schema)
    except _UNFIT:
        pass
    kept = []
    dead = list(dead)
    for i, row in rows:
        try:
            _user_table([(i, row)], user_schema)
            kept.append((i, row))
        except _UNFIT as e:
            dead.append((i, f"output row does not match output_schema: {_describe(e)}"))
    dead.sort(key=lambda d: d[0])
    return kept, dead, _user_table(kept, user_schema)


_UNFIT = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def _user_table(rows: list[tuple[int, dict[str, Any]]], user_schema: pa.Schema) -> pa.Table:
    """What ``Table.from_pylist`` does (a missing field is null, an unknown one ignored), a column at a time."""
    return pa.Table.from_pydict({n: [row.get(n) for _, row in rows] for n in user_schema.names}, schema=user_schema)


def batch_records(batch: pa.RecordBatch) -> Iterator[Record]:
    """The records a per-record function is called with, from a batch of the source's columns."""
    streams, partitions, offsets, keys, values = (
        batch.column(name).to_pylist() for name in ("stream", "partition", "offset", "key", "value")
    )
    stamps = column_values(batch.column("timestamp"))
    return records(streams, partitions, offsets, keys, values, stamps, batch.column("headers").to_pylist())


def _run_per_record(
    fn: Any, batch: pa.RecordBatch, ctx: TaskContext
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    rows: list[tuple[int, dict[str, Any]]] = []
    dead: list[tuple[int, str]] = []
    for i, record in enumerate(batch_records(batch)):
        try:
            out = fn(record, ctx)
        except Exception as e:
            dead.append((i, _describe(e)))
            continue
        if out is None:
            continue
        for row in out if isinstance(out, list) else [out]:
            if not isinstance(row, dict):
                dead.append((i, f"TypeError: process function returned {type(row).__name__}, expected dict"))
                break
            rows.append((i, row))
    return rows, dead


_UTC = ("UTC", "Etc/UTC", "+00:00")


def column_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """``column.to_pylist()``, with Spark's timestamps (microseconds, UTC or naive) converted 5x faster.

    pyarrow makes each zone-aware datetime through the time zone database,
    5 us a value: the largest single cost of a cheap per-record job (a third
    of its processing step). Adding the microseconds to the epoch, in the
    same zone object, gives equal values; other zones (where that arithmetic
    would be wall-clock arithmetic across daylight saving) and units keep
    pyarrow's path.
    """
    kind = column.type
    if not (pa.types.is_timestamp(kind) and kind.unit == "us" and (kind.tz is None or kind.tz in _UTC)):
        values: list[Any] = column.to_pylist()
        return values
    epoch, micros = pa.scalar(0, kind).as_py(), column.cast(pa.int64()).to_pylist()
    if column.null_count:
        return [None if v is None else epoch + timedelta(microseconds=v) for v in micros]
    return [epoch + timedelta(microseconds=v) for v in micros]


def _rows_from_table(result: Any, batch: pa.RecordBatch) -> list[tuple[int, dict[str, Any]]]:
    if not isinstance(result, pa.Table | pa.RecordBatch):
        raise TypeError(f"an Arrow process function must return a pyarrow.Table, got {type(result).__name__}")
    missing = {"stream", "partition", "offset"} - set(result.schema.names)
    if missing:
        raise ValueError(f"process function output lacks lineage columns {sorted(missing)}")
    index = {
        (s, p, o): i
        for i, (s, p, o) in enumerate(
            zip(
                batch.column("stream").to_pylist(),
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                strict=True,
            )
        )
    }
    rows = []
    for row in result.to_pylist():
        key = (row["stream"], row["partition"], str(row["offset"]))
        if key not in index:
            raise ValueError(f"process function emitted a row for a record it was not given: {key}")
        rows.append((index[key], row))
    return rows


def _assemble(
    batch: pa.RecordBatch,
    rows: list[tuple[int, dict[str, Any]]],
    dead: list[tuple[int, str]],
    user: pa.Table,
    out_schema: pa.Schema,
    batch_id: int,
    state: _TaskState,
) -> pa.RecordBatch:
    """Data and dead-letter rows interleaved in input order, each with its lineage and task sequence."""
    sources = [i for i, _ in rows]
    if not dead and sources == sorted(sources):  # the common case: nothing dead, rows in input order
        n = len(rows)
        take = pa.array(sources, pa.int64())
        user_columns = [user.column(j).combine_chunks() for j in range(user.num_columns)]
        kinds = pa.repeat(pa.scalar(schemas.DATA, pa.string()), n)
        errors, values = pa.nulls(n, pa.string()), pa.nulls(n, pa.binary())
    else:
        order = sorted([(i, 0, k) for k, i in enumerate(sources)] + [(i, 1, k) for k, (i, _) in enumerate(dead)])
        n = len(order)
        take = pa.array([i for i, _, _ in order], pa.int64())
        source_values = batch.column("value")
        picked = user.take(pa.array([None if is_dead else k for _, is_dead, k in order], pa.int64()))
        user_columns = [picked.column(j).combine_chunks() for j in range(picked.num_columns)]
        kinds = pa.array([schemas.DEAD if is_dead else schemas.DATA for _, is_dead, _ in order], pa.string())
        errors = pa.array([dead[k][1] if is_dead else None for _, is_dead, k in order], pa.string())
        values = pa.array([source_values[i].as_py() if is_dead else None for i, is_dead, _ in order], pa.binary())
    lineage = batch.select([f.name for f in schemas.LINEAGE]).take(take)
    arrays = [lineage.column(j) for j in range(lineage.num_columns)]
    arrays += [
        pa.repeat(pa.scalar(batch_id, pa.int64()), n),
        pa.array(range(state.seq, state.seq + n), pa.int64()),
    ]
    state.seq += n
    arrays += user_columns
    arrays += [kinds, errors, values, pa.nulls(n, pa.string())]
    return pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def _marker_row(batch: pa.RecordBatch, state: _TaskState, batch_id: int, out_schema: pa.Schema) -> pa.RecordBatch:
    marker = TaskMarker.loads(batch.column("marker")[0].as_py())
    marker.state_files = state.state_files
    marker.state_stats = state.state_stats
    marker.records_processed = state.records_in
    marker.records_out = state.records_out
    marker.dead_letters = state.dead
    marker.process_ns = state.process_ns
    row: dict[str, Any] = {name: None for name in out_schema.names}
    row.update(
        virtual_task=batch.column("virtual_task")[0].as_py(),
        model_version=batch.column("model_version")[0].as_py(),
        batch_id=batch_id,
        _kind=schemas.MARKER,
        _marker=marker.dumps(),
    )
    return pa.RecordBatch.from_pylist([row], schema=out_schema)


def _describe(error: BaseException) -> str:
    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    place = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(error).__name__}: {error}{place}"[:2000]
