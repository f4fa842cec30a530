"""Folding a state's changes into its ``current`` table: one row per key, what a Spark user reads.

``compact`` merges the newest ``current`` (sorted by key hash) with the changes after its segment, key by key, one
current file at a time, drops the rows whose time-to-live ran out at the newest batch's time, and writes the
result as the next version of ``current``, in files sorted by key hash and disjoint (so an executor builds a
fraction streaming, file by file); the commit names the segment it folds in and carries the application
transaction ``(state-compactor, segment)``, so two compactions never both land one segment. It then retires the
change files the *previous* version of ``current`` folded in: a reader that built from that version still finds
every change after it. Memory holds the changes since the last compaction and one current file, never the
whole state. When it runs: ``due`` (docs/design.md, "Keyed state").
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, Transaction
from deltalake.transaction import AddAction, RemoveAction

from pipelines.core import state as rules
from pipelines.core.model import JobModel
from pipelines.deltaio import file_batches, read_delta, readable
from pipelines.faults import crash_point
from pipelines.state import layout
from pipelines.state.durable import (
    BATCH_KEY,
    COMPACTOR_APP,
    SEGMENT_KEY,
    StateTables,
    disjoint,
    removes,
)
from pipelines.storage.home import Home
from pipelines.storage.objects import store_for

FILE_BYTES = 64 << 20
"""Target size of a ``current`` file: large enough that a big state has few files, small enough to stream."""
VACUUM_HOURS = 1
"""How long files that left a table stay on the store: a reader that opened an older version (a task building a
base, a verification) still finds them. Compaction runs at most every ``MIN_INTERVAL_S``, so at most a few
copies of the state wait for the vacuum."""
MIN_INTERVAL_S = 60.0
"""A running driver compacts a state at most this often ..."""
MAX_INTERVAL_S = 600.0
"""... and at least this often while its changes grow."""
RATIO = 0.25
"""... or sooner, once the changes since the last compaction hold this share of ``current``'s rows."""
BATCH_ROWS = 8192
"""Rows per write: a file can end after any of them (where the hash changes), so files come out near FILE_BYTES."""
SMALL_BYTES = 4 * FILE_BYTES
"""A ``current`` up to this size is compacted at the end of every run, whatever its changes."""


@dataclass(frozen=True)
class Compaction:
    """What one compaction of one state did."""

    state: str
    segment: int
    rows: int
    expired: int
    changes_folded: int
    files_retired: int
    seconds: float
    tasks: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Keys and bytes of the state per virtual task of the model given (by the key's bucket and last partition)."""


def due(tables: StateTables, last_run_s: float, now_s: float, *, ending: bool = False) -> bool:
    """Whether a running driver should compact now (``last_run_s``: its last round, or its start).

    Once the changes since the last compaction hold ``RATIO`` of ``current``'s rows (at least a minute after the
    last round); or, for a small ``current`` (a few files: a compaction takes seconds), once ``MAX_INTERVAL_S``
    passed with any change, and at the run's end (``ending``), so a stopped job's ``current`` holds every batch.
    A large state is compacted only by the ratio: each compaction rewrites all of ``current``, and the
    ``state_<job>_<state>`` view shows the changes after it meanwhile.
    """
    if tables.segment() <= tables.current_as_of():
        return False
    if not ending and now_s - last_run_s < MIN_INTERVAL_S:
        return False
    small = sum(int(a["size_bytes"]) for a in _files(tables)) <= SMALL_BYTES
    if small and (ending or now_s - last_run_s >= MAX_INTERVAL_S):
        return True
    return _ratio_reached(tables)


def _ratio_reached(tables: StateTables) -> bool:
    current_rows, changed_rows = _rows(tables)
    return changed_rows >= max(1, RATIO * current_rows)


def _files(tables: StateTables) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = pa.table(tables.current().get_add_actions(flatten=True)).to_pylist()
    return files


def compact(home: Home, job: str, spec: rules.StateSpec, model: JobModel | None = None) -> Compaction | None:
    """Fold every committed change into the next version of ``current``; None when there was nothing to fold.

    ``model``: the model in force, whose virtual tasks the rows are counted for (``Compaction.tasks``).
    """
    t0 = time.perf_counter()
    tables = StateTables(home, job, spec)
    latest = tables.segment()
    current = tables.current()
    as_of = tables.current_as_of(current)
    if latest <= as_of:
        return None
    raw = tables.read_changes(as_of, latest)
    batch = _newest_batch(raw)
    changes = _latest_per_key(raw, spec)
    del raw
    now_us = _newest_time(changes)
    schema = layout.current_schema(spec)
    counts = {"rows": 0, "expired": 0}
    owners = TaskCounter(model)

    def merged() -> Iterator[pa.RecordBatch]:
        actions = pa.table(current.get_add_actions(flatten=True)).to_pylist()
        ordered = sorted(actions, key=lambda a: a.get(f"min.{rules.KEY_HASH}") or 0)
        if not disjoint(ordered):  # a table this module did not write: folded in memory once, then it is
            whole = read_delta(current, schema=schema)
            if changes.num_rows and whole.num_rows:
                whole = whole.filter(pc.invert(pc.is_in(whole[rules.KEY], value_set=changes[rules.KEY])))
            yield from _kept(pa.concat_tables([whole, changes]), spec, now_us, counts, owners)
            return
        hashes = changes.column(rules.KEY_HASH).to_numpy() if changes.num_rows else np.empty(0, np.int64)
        keys = changes.column(rules.KEY)
        taken = 0
        for action in ordered:  # file by file, batch by batch: memory holds the changes and one batch
            for batch in file_batches(current, action, schema):
                old = pa.Table.from_batches([batch])
                high = int(old.column(rules.KEY_HASH)[-1].as_py())
                end = int(np.searchsorted(hashes, high, side="right"))
                if changes.num_rows:  # against every change: a run of one hash may cross a batch's edge
                    old = old.filter(pc.invert(pc.is_in(old[rules.KEY], value_set=keys)))
                yield from _kept(
                    pa.concat_tables([old, changes.slice(taken, end - taken)]), spec, now_us, counts, owners
                )
                taken = end
        if taken < changes.num_rows:
            yield from _kept(changes.slice(taken), spec, now_us, counts, owners)

    adds = write_files(tables, merged())
    crash_point("mid_state_compaction")
    old_files = pa.table(current.get_add_actions(flatten=True)).to_pylist()
    actions: list[AddAction | RemoveAction] = [*removes(old_files), *adds]
    with readable(tables.current_path):
        current.create_write_transaction(
            actions,
            "append",
            pa.schema(current.schema().to_arrow()),
            commit_properties=CommitProperties(
                app_transactions=[Transaction(COMPACTOR_APP, latest)],
                custom_metadata={SEGMENT_KEY: str(latest), BATCH_KEY: batch},
            ),
        )
    retired = _retire(tables, as_of)
    with readable(tables.current_path):
        current.vacuum(retention_hours=VACUUM_HOURS, dry_run=False, enforce_retention_duration=False)
    return Compaction(
        spec.name,
        latest,
        counts["rows"],
        counts["expired"],
        changes.num_rows,
        retired,
        time.perf_counter() - t0,
        owners.figures(),
    )


def write_files(tables: StateTables, batches: Iterator[pa.RecordBatch]) -> list[AddAction]:
    """Rows sorted by key hash, as parquet files of about ``FILE_BYTES`` in ``current``'s folder, in order, each
    range of hashes in one file only (a file ends only where the hash changes); their add actions, not committed.

    Written here rather than by ``write_deltalake``, whose writer spreads consecutive rows over files that
    overlap (measured: 5 of 8 neighbouring files shared hashes), so no reader could stream the state in order.
    """
    root = tables.current_path
    store = store_for(root)
    adds: list[AddAction] = []
    writer: pq.ParquetWriter | None = None
    stream: Any = None
    name, rows, low, high = "", 0, 0, 0

    def close() -> None:
        nonlocal writer, stream
        if writer is None:
            return
        writer.close()
        size = stream.tell()
        stream.close()
        stats = {
            "numRecords": rows,
            "minValues": {rules.KEY_HASH: low},
            "maxValues": {rules.KEY_HASH: high},
            "nullCount": {rules.KEY_HASH: 0},
        }
        adds.append(
            AddAction(
                path=name,
                size=int(size),
                partition_values={},
                modification_time=int(time.time() * 1000),
                data_change=True,
                stats=json.dumps(stats),
            )
        )
        writer, stream = None, None

    store.makedirs(root)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        hashes = batch.column(rules.KEY_HASH)
        first, last = int(hashes[0].as_py()), int(hashes[-1].as_py())
        if writer is not None and stream.tell() >= FILE_BYTES and first != high:
            close()
        if writer is None:
            name = f"part-{uuid.uuid4().hex}.parquet"
            stream = store.filesystem().open_output_stream(store.arrow_path(root / name))
            writer = pq.ParquetWriter(stream, batch.schema)
            rows, low = 0, first
        writer.write_batch(batch)
        rows, high = rows + batch.num_rows, last
    close()
    return adds


def _latest_per_key(changes: pa.Table, spec: rules.StateSpec) -> pa.Table:
    """Each key's newest row among the changes (the highest segment), sorted by key hash, as ``current_schema``."""
    schema = layout.current_schema(spec)
    if changes.num_rows == 0:
        return schema.empty_table()
    rows = changes.select(schema.names)
    order = pc.sort_indices(rows, sort_keys=[(rules.KEY, "ascending"), (rules.SEGMENT, "descending")])
    rows = rows.take(order)
    keys = rows.column(rules.KEY).combine_chunks()
    first = np.ones(len(keys), dtype=bool)
    if len(keys) > 1:
        first[1:] = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1)).to_numpy(zero_copy_only=False)
    rows = rows.filter(pa.array(first))
    return rows.sort_by(rules.KEY_HASH).cast(schema)


def _newest_batch(changes: pa.Table) -> str:
    """``<model version>/<batch id>`` of the newest batch among the changes: which batch a version of ``current``
    is as of, for a reader that needs the state at a given batch (``pipelines.state.inspect``)."""
    if changes.num_rows == 0:
        return ""
    top = pc.max(changes.column(rules.SEGMENT)).as_py()
    newest = changes.filter(pc.equal(changes.column(rules.SEGMENT), top))
    return f"{newest.column('model_version')[0].as_py()}/{newest.column('batch_id')[0].as_py()}"


def _newest_time(changes: pa.Table) -> int | None:
    if changes.num_rows == 0:
        return None
    newest = pc.max(changes.column(rules.UPDATED_AT).cast(pa.int64())).as_py()
    return None if newest is None else int(newest)


def _kept(
    rows: pa.Table,
    spec: rules.StateSpec,
    now_us: int | None,
    counts: dict[str, int],
    owners: TaskCounter | None = None,
) -> Iterator[pa.RecordBatch]:
    """Rows sorted by key hash, without those whose time-to-live ran out by the newest batch's time."""
    if rows.num_rows == 0:
        return
    if spec.ttl_s is not None and now_us is not None:
        updated = rows.column(rules.UPDATED_AT).cast(pa.int64())
        alive = pc.greater(pc.add(updated, int(spec.ttl_s * 1_000_000)), now_us)
        alive = pc.fill_null(alive, True)
        before = rows.num_rows
        rows = rows.filter(alive)
        counts["expired"] += before - rows.num_rows
    rows = rows.sort_by(rules.KEY_HASH)
    counts["rows"] += rows.num_rows
    for batch in rows.combine_chunks().to_batches(max_chunksize=BATCH_ROWS):
        if owners is not None:
            owners.count(batch)
        yield batch


class TaskCounter:
    """Rows and bytes of a state per virtual task of a model: the task owning a row's key bucket (hash mod the
    factor) of the partition its key was last read from; a key last read from a partition the model does not
    read (a Kinesis shard moved to another slot) counts under ``OTHER``."""

    OTHER = "(other partitions)"

    def __init__(self, model: JobModel | None) -> None:
        self.factor = model.elasticity_factor if model is not None else 1
        self.names: dict[tuple[str, int, int], str] = {}
        if model is not None:
            for ssp, task in model.ssp_to_task().items():
                self.names[(ssp.stream, ssp.partition, ssp.key_bucket or 0)] = str(task)
        self.keys: dict[str, int] = {}
        self.bytes: dict[str, int] = {}

    def count(self, batch: pa.RecordBatch) -> None:
        if not self.names or batch.num_rows == 0:
            return
        frame = pd.DataFrame(
            {
                "stream": batch.column(rules.LAST[0]).to_numpy(zero_copy_only=False),
                "partition": batch.column(rules.LAST[1]).fill_null(-1).to_numpy(zero_copy_only=False),
                "bucket": batch.column(rules.KEY_HASH).to_numpy() % self.factor,
            }
        )
        per_row = batch.nbytes / batch.num_rows
        for (stream, partition, bucket), n in frame.value_counts().items():
            task = self.names.get((stream, int(partition), int(bucket)), self.OTHER)
            self.keys[task] = self.keys.get(task, 0) + int(n)
            self.bytes[task] = self.bytes.get(task, 0) + int(n * per_row)

    def figures(self) -> dict[str, tuple[int, int]]:
        return {task: (n, self.bytes[task]) for task, n in self.keys.items()}


def _retire(tables: StateTables, upto: int) -> int:
    """Remove the change files whose segments are all at or before ``upto`` (folded into a kept ``current``)."""
    if upto <= 0:
        return 0
    dt = tables.changes()
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    old = [a for a in actions if (a.get(f"max.{rules.SEGMENT}") or 0) <= upto]
    if not old:
        return 0
    with readable(tables.changes_path):
        retired: list[AddAction | RemoveAction] = [*removes(old, layout.CHANGES_PARTITIONS)]
        dt.create_write_transaction(
            retired,
            "append",
            dt.schema(),
            partition_by=list(layout.CHANGES_PARTITIONS),
            commit_properties=CommitProperties(custom_metadata={"pipelines.state.retired_upto": str(upto)}),
        )
        dt.update_incremental()
        dt.vacuum(retention_hours=VACUUM_HOURS, dry_run=False, enforce_retention_duration=False)
    return len(old)


def _rows(tables: StateTables) -> tuple[int, int]:
    """(rows of ``current``, change rows after its segment), from the add actions alone."""
    as_of = tables.current_as_of()
    current = pa.table(tables.current().get_add_actions(flatten=True))
    changes = tables.change_actions(as_of, tables.segment())
    current_rows = int(pc.sum(current["num_records"]).as_py() or 0) if current.num_rows else 0
    return current_rows, sum(int(a.get("num_records") or 0) for a in changes)


def compact_job_states(
    home: Home, job: str, specs: tuple[rules.StateSpec, ...], model: JobModel | None = None
) -> list[Compaction]:
    """Compact every state of a job now (``pipelines job compact``)."""
    done = []
    for spec in specs:
        found = compact(home, job, spec, model)
        if found is not None:
            done.append(found)
    return done


def summary(done: list[Compaction]) -> str:
    """One line for a driver's log or a CLI."""
    return ", ".join(
        f"state {c.state}: {c.rows:,} keys at segment {c.segment} ({c.changes_folded:,} changes folded"
        + (f", {c.expired:,} expired" if c.expired else "")
        + f", {c.seconds:.2f}s)"
        for c in done
    )
