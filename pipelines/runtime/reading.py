"""What one virtual task reads in one micro-batch, and the reading itself, in the sink's writer on executors.

The source (``runtime.source``) plans a batch on the driver and hands Spark
one ``TaskRange`` per virtual task; Spark ships it to an executor, where the
source's ``read`` passes it on as a single row (``describe``) and the sink's
writer reads the task's records here (``read_task``) and processes them in
the same Python worker. The records never enter the JVM: Spark's Arrow ->
rows -> Arrow crossing between a Python source and a Python writer cost a
cheap job more CPU than its own processing. Nothing ``read_task`` needs may
live in reader state, so each ``TaskRange`` carries it all.

Reading: the virtual tasks of one partition share one fetch of its range
(``runtime.fetch``), each keeps its bucket's records, in the partition's
order, and ends with a marker row (``runtime.markers``).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from pipelines.core.positions import Position
from pipelines.core.ssp import SystemStreamPartition
from pipelines.runtime import fetch, schemas
from pipelines.runtime.markers import TaskMarker
from pipelines.runtime.offsets import Offset, Pending
from pipelines.runtime.outage import record_outage
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem

# Input-system clients opened by ``read_task`` on executors, kept for the life of the (reused) Python worker:
# opening a client costs a connection or a log replay, paid per task per batch otherwise.
_EXECUTOR_SYSTEMS: dict[tuple[str, str, str], InputSystem] = {}


_TASKS: dict[str, TaskRange] = {}
"""The ``TaskRange`` of the task this worker reads now, by name: the processing step after the read (in the same
process, on the same rows) finds the batch's state versions and the input systems' order in it."""


def task_range(name: str) -> TaskRange | None:
    """The description of virtual task ``name`` this worker read last (``read_task``)."""
    return _TASKS.get(name)


def record_order(task: TaskRange, stream_system: str) -> Any:
    """The order of a system's record positions (its ``position_key``), for a task's records."""
    return _executor_system(stream_system, Home(task.home), task.settings.get(stream_system, {})).position_key


def _executor_system(name: str, home: Home, settings: Mapping[str, Any]) -> InputSystem:
    from pipelines.systems.registry import open_system

    key = (name, str(home.root), json.dumps(settings, sort_keys=True, default=str))
    system = _EXECUTOR_SYSTEMS.get(key)
    if system is None:
        system = _EXECUTOR_SYSTEMS[key] = open_system(name, home, settings)
    return system


@dataclass
class SspRange:
    """One (SSP, key bucket) of a virtual task in one micro-batch."""

    ssp: str  # wire form, with the key bucket when the factor is above 1
    fetch_start: Position  # where the partition's shared fetch starts: its floor
    start: Position  # where this bucket stands (ahead of the floor after an uneven migration)
    end: Any  # a position, or a pending end's JSON


@dataclass
class TaskRange(InputPartition):
    """Everything one virtual task needs to read its records of one micro-batch."""

    home: str
    job: str
    model_version: int
    factor: int
    task_name: str
    ranges: list[SspRange]  # old partitions first
    settings: dict[str, dict[str, Any]]  # the job's input-system settings (never secrets)
    shared: bool  # several virtual tasks read each partition: fetch once, stage, and take a bucket
    stores: dict[str, Any] | None = None  # the batch's adjunct store versions, from its end offset (None: none)
    state: dict[str, Any] | None = None  # the batch's state segments and time, from its end offset (None: none)


def describe(task: TaskRange) -> bytes:
    """A ``TaskRange`` as one cell: pickled, as Spark itself ships input partitions to executors.

    Pickle, not JSON: positions are the input systems' own values, and the
    bytes only travel from this query's source to this query's writer.
    """
    return pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)


def described(cell: bytes) -> TaskRange:
    task = pickle.loads(cell)
    if not isinstance(task, TaskRange):
        raise TypeError(f"expected a TaskRange from the elastic source, got {type(task).__name__}")
    return task


def distinct_keys(keys: pa.ChunkedArray) -> int:
    """Distinct keys among a task's records, a null key counting once per record (it hashes its offset).

    The sample of the skew test (``pipelines.observe.skew``): hashing spreads
    keys, not records, over buckets. Summed over a task's ranges, a key in two
    partitions counts twice; about 0.04 ms per 4,000 records.
    """
    import pyarrow.compute as pc

    return int(pc.count_distinct(keys, mode="only_valid").as_py()) + int(keys.null_count)


def read_described(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The records of every virtual task described in the source's rows (one per Spark partition), in order."""
    for batch in batches:
        for cell in batch.column("task").to_pylist():
            yield from read_task(described(cell))


def read_task(partition: TaskRange) -> Iterator[pa.RecordBatch]:
    """The task's records in the partitions' order (old partitions first), then its marker row."""
    home = Home(partition.home)
    target = schemas.arrow(schemas.RECORDS)
    marker = TaskMarker(partition.task_name, stores=partition.stores, state=partition.state)
    _TASKS[partition.task_name] = partition  # the processing step, in this process, opens its states from it
    if partition.stores is not None:  # the processing step opens the task's store views at these versions
        from pipelines.adjunct.runtime import remember_batch

        remember_batch(home, partition.job, partition.model_version, _batch_id(), partition.stores)
    for r in partition.ranges:
        ssp = SystemStreamPartition.from_wire(r.ssp)
        system = _executor_system(ssp.system, home, partition.settings.get(ssp.system, {}))
        end: Offset = Pending.from_json(r.end) if isinstance(r.end, dict) else r.end
        got = fetch.fetch(
            fetch.RangeRead(system, home, partition.job, partition.model_version, ssp.whole(), r.fetch_start, end),
            factor=partition.factor,
            shared=partition.shared,
            bucket=ssp.key_bucket if partition.shared else None,
        )
        if got.stats.get("outage_s"):
            seconds = float(got.stats["outage_s"])
            record_outage(home, partition.job, partition.model_version, seconds, f"a read of {ssp.whole().wire()}")
        table = got.bucket(ssp.key_bucket) if partition.shared and ssp.key_bucket is not None else got.records
        if r.start != r.fetch_start and table.num_rows:  # this bucket is ahead of its partition's floor
            offsets = table.column("offset").to_pylist()
            keep = system.unread(ssp.stream, ssp.partition, offsets, r.start)
            table = table.filter(pa.array(keep, pa.bool_()))
        after = got.next_position
        if system.position_key(r.start) > system.position_key(after):
            after = r.start  # a bucket ahead of the batch's end keeps its place
        marker.ends[r.ssp] = after
        marker.records_in += table.num_rows
        marker.keys_in += distinct_keys(table.column("key")) if table.num_rows else 0
        marker.records_fetched += got.records_fetched
        marker.bytes_fetched += got.bytes_fetched
        marker.read_ns += got.read_ns
        marker.key_hash_ns += got.key_hash_ns
        marker.wait_ns += got.wait_ns
        if got.stage:
            marker.stages.append(got.stage)
        for name, value in got.stats.items():
            marker.stats[name] = marker.stats.get(name, 0.0) + value
        if table.num_rows:
            n = table.num_rows
            yield pa.RecordBatch.from_arrays(
                [
                    pa.repeat(pa.scalar(partition.task_name, pa.string()), n),
                    pa.repeat(pa.scalar(partition.model_version, pa.int64()), n),
                    pa.repeat(pa.scalar(ssp.key_bucket, pa.int32()), n),
                    pa.repeat(pa.scalar(ssp.stream, pa.string()), n),
                    table.column("partition").combine_chunks(),
                    table.column("offset").combine_chunks(),
                    table.column("key").combine_chunks(),
                    table.column("value").combine_chunks(),
                    table.column("timestamp").combine_chunks(),
                    table.column("headers").combine_chunks(),
                    pa.nulls(n, pa.string()),
                ],
                schema=target,
            )
    yield pa.RecordBatch.from_pylist(
        [{"virtual_task": partition.task_name, "model_version": partition.model_version, "marker": marker.dumps()}],
        schema=target,
    )


def _batch_id() -> int:
    from pyspark import TaskContext as SparkTaskContext

    ctx = SparkTaskContext.get()
    value = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    return int(value) if value is not None else -1
