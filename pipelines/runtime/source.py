"""The elastic streaming source: one Spark input partition per virtual task per micro-batch.

Offsets (Spark's, per micro-batch) are the next offset to read of every
(SSP, key bucket) of the job model the query runs, so a batch's end offsets
are exactly the checkpoints the sink appends when it commits the batch.

Spark runs this reader in two places (findings of the runtime spike): a
long-lived driver-side runner calls ``initialOffset``/``latestOffset``/
``partitions``, and ``read`` runs on executors on an unpickled copy of
another reader instance. So nothing ``read`` needs may live in reader state:
each ``TaskRange`` carries it all.

Admission control: at most ``maxRecords`` offsets per micro-batch (the driver
passes ``batch.max_records`` times the elasticity factor), water-filled over
the partitions (``share_budget``). All key buckets of a partition advance to the same
end offset, so a bucket that never receives a record does not pin its
checkpoint in the past (DESIGN, "Checkpoint migration"); a bucket that starts
ahead (after a merge took the minimum of its siblings) skips what it already
processed.

Partition expansion: a partition created by an expansion is held back (no
offsets admitted) until every key bucket of the partition its keys came from
has been consumed past the expansion point, so a key's records from before
the expansion are processed before its records after it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pipelines.control.home import Home
from pipelines.core.admission import share_budget
from pipelines.core.hashing import key_buckets
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStreamPartition
from pipelines.runtime import schemas
from pipelines.runtime.requests import drain_request

WHOLE = -1  # key bucket of a factor-1 (whole partition) offset

# Input-system clients opened by ``read`` on executors, kept for the life of the (reused) Python worker:
# opening the embedded log loads its Delta log and plans a snapshot, ~75 ms, paid per task per batch otherwise.
# A client refreshes its snapshot itself when asked past its end, so caching never reads stale data.
_EXECUTOR_SYSTEMS: dict[tuple[str, str], Any] = {}


def _executor_system(name: str, home: Home) -> Any:
    from pipelines.systems.registry import open_system

    key = (name, str(home.root))
    system = _EXECUTOR_SYSTEMS.get(key)
    if system is None:
        system = _EXECUTOR_SYSTEMS[key] = open_system(name, home)
    return system


def offset_key(ssp: SystemStreamPartition) -> str:
    bucket = WHOLE if ssp.key_bucket is None else ssp.key_bucket
    return f"{ssp.system}|{ssp.stream}|{ssp.partition}|{bucket}"


def parse_offset_key(key: str) -> SystemStreamPartition:
    system, stream, partition, bucket = key.split("|")
    b = int(bucket)
    return SystemStreamPartition(system, stream, int(partition), None if b == WHOLE else b)


@dataclass
class TaskRange(InputPartition):
    """Everything one virtual task needs to read its records of one micro-batch."""

    home: str
    job: str
    model_version: int
    factor: int
    task_name: str
    # (system, stream, partition, key bucket or -1, start, end), old partitions first
    ranges: list[tuple[str, str, int, int, str, str]]


class ElasticSource(DataSource):
    """``spark.readStream.format("elastic").option("home", ...).option("job", ...).option("modelVersion", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "elastic"

    def schema(self) -> StructType:
        return schemas.SOURCE

    def streamReader(self, schema: StructType) -> ElasticReader:
        return ElasticReader(self.options)


class ElasticReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Any) -> None:
        self.home = Home(_path(options["home"]))
        self.job = options["job"]
        self.version = int(options["modelVersion"])
        self.max_records = int(options.get("maxRecords", "10000"))
        self._model: JobModel | None = None
        self._target: dict[SystemStreamPartition, int] | None = None

    # ------------------------------------------------------------ driver side

    def model(self) -> JobModel:
        if self._model is None:
            from pipelines.control import ControlPlane

            self._model = ControlPlane(self.home).job_models.get(self.job, self.version)
        return self._model

    def initialOffset(self) -> dict:
        """The model's latest checkpoints in the control plane: its start checkpoints, or where it stopped."""
        from pipelines.control import ControlPlane

        checkpoints = ControlPlane(self.home).checkpoints.latest(self.job, self.version)
        model = self.model()
        offsets: dict[SystemStreamPartition, str] = {}
        for ssp in model.ssp_to_task():
            offsets[ssp] = checkpoints.offset(ssp, ssp.key_bucket or 0)
        return _encode(self.version, offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of "everything available now" once, so a trigger-available-now run terminates."""
        self._target = self._end_offsets()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        version, offsets = _decode(start)
        if drain_request(self.home, self.job, self.version).exists():
            return start  # the driver is stopping this query between batches: admit nothing new
        ends = self._end_offsets()
        if self._target is not None:
            ends = {ssp: min(end, self._target.get(ssp, end)) for ssp, end in ends.items()}
        by_partition: dict[SystemStreamPartition, list[SystemStreamPartition]] = {}
        for ssp in offsets:
            by_partition.setdefault(ssp.whole(), []).append(ssp)
        low = {whole: min(int(offsets[s]) for s in buckets) for whole, buckets in by_partition.items()}
        eligible = [w for w in by_partition if not self._held_back(w, low)]
        backlog = {w: max(0, ends.get(w, low[w]) - low[w]) for w in eligible}
        admit = dict(backlog)
        if isinstance(limit, ReadMaxRows) and not isinstance(limit, ReadAllAvailable):
            admit = share_budget(backlog, limit.max_rows)
        result = dict(offsets)
        for whole in eligible:
            end = low[whole] + admit[whole]
            for ssp in by_partition[whole]:
                result[ssp] = str(max(int(offsets[ssp]), end))
        return _encode(version, result)

    def partitions(self, start: dict, end: dict) -> list[TaskRange]:
        _, first = _decode(start)
        _, last = _decode(end)
        model = self.model()
        tasks = []
        for task in model.tasks():
            ranges = [
                (s.system, s.stream, s.partition, WHOLE if s.key_bucket is None else s.key_bucket, first[s], last[s])
                for s in sorted(task.ssps, key=lambda s: (s.partition, s.stream, s.system))
                if int(last[s]) > int(first[s])
            ]
            if ranges:
                tasks.append(
                    TaskRange(
                        str(self.home.root),
                        self.job,
                        self.version,
                        model.elasticity_factor,
                        task.task_name.name,
                        ranges,
                    )
                )
        return tasks

    def commit(self, end: dict) -> None:
        """Nothing: Spark calls this one batch late and never for the last batch; the sink writes checkpoints."""

    def _system(self, name: str) -> Any:
        """Input-system clients, kept for the life of the driver-side runner (they cache table snapshots)."""
        from pipelines.systems.registry import open_system

        systems = self.__dict__.setdefault("_systems", {})
        if name not in systems:
            systems[name] = open_system(name, self.home)
        return systems[name]

    def _end_offsets(self) -> dict[SystemStreamPartition, int]:
        ends: dict[SystemStreamPartition, int] = {}
        for stream in {w.system_stream for w in self.model().whole_ssps()}:
            for p, end in self._system(stream.system).end_offsets(stream.stream).items():
                ends[SystemStreamPartition(stream.system, stream.stream, p)] = int(end)
        return ends

    def _held_back(self, whole: SystemStreamPartition, low: dict[SystemStreamPartition, int]) -> bool:
        """Whether ``whole`` came from an expansion whose old partition is not yet read past the expansion point."""
        for expansion in self._system(whole.system).describe(whole.stream).expansions:
            if whole.partition in expansion.new_partitions():
                source = SystemStreamPartition(whole.system, whole.stream, expansion.source_partition(whole.partition))
                point = int(expansion.end_offsets[source.partition])
                if source in low and low[source] < point:
                    return True
        return False

    # ------------------------------------------------------------ executor side

    def read(self, partition: TaskRange) -> Iterator[pa.RecordBatch]:
        """The task's records in offset order (old partitions first), then its marker row."""
        home = Home(_path(partition.home))
        target = schemas.arrow(schemas.SOURCE)
        hash_ns = read_ns = 0
        records = fetched = 0
        ends = []
        for system_name, stream, p, bucket, start, end in partition.ranges:
            system = _executor_system(system_name, home)
            t0 = time.perf_counter_ns()
            table = system.read(stream, p, int(start), int(end))
            t1 = time.perf_counter_ns()
            fetched += table.num_rows
            if bucket != WHOLE:
                keys = table.column("key").to_pylist()
                offsets = table.column("offset").to_pylist()
                mask = [b == bucket for b in key_buckets(keys, offsets, partition.factor)]
                table = table.filter(pa.array(mask, pa.bool_()))
            t2 = time.perf_counter_ns()
            read_ns += t1 - t0
            hash_ns += t2 - t1
            records += table.num_rows
            ends.append([system_name, stream, p, bucket, end])
            if table.num_rows:
                n = table.num_rows
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.repeat(pa.scalar(partition.task_name, pa.string()), n),
                        pa.repeat(pa.scalar(partition.model_version, pa.int64()), n),
                        pa.repeat(pa.scalar(None if bucket == WHOLE else bucket, pa.int32()), n),
                        pa.repeat(pa.scalar(stream, pa.string()), n),
                        table.column("partition").cast(pa.int32()).combine_chunks(),
                        table.column("offset").cast(pa.string()).combine_chunks(),
                        table.column("key").combine_chunks(),
                        table.column("value").combine_chunks(),
                        table.column("timestamp").cast(pa.timestamp("us", tz="UTC")).combine_chunks(),
                        table.column("headers").combine_chunks(),
                        pa.nulls(n, pa.string()),
                    ],
                    schema=target,
                )
        marker = {
            "task": partition.task_name,
            "ends": ends,
            "records_in": records,
            "records_fetched": fetched,
            "read_ns": read_ns,
            "key_hash_ns": hash_ns,
        }
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "virtual_task": partition.task_name,
                    "model_version": partition.model_version,
                    "marker": json.dumps(marker, separators=(",", ":")),
                }
            ],
            schema=target,
        )


def _encode(version: int, offsets: dict[SystemStreamPartition, str]) -> dict:
    # Spark compares offsets as JSON text, so the key order must be deterministic.
    return {"model": version, "offsets": {offset_key(s): offsets[s] for s in sorted(offsets, key=offset_key)}}


def _decode(offset: dict) -> tuple[int, dict[SystemStreamPartition, str]]:
    return int(offset["model"]), {parse_offset_key(k): v for k, v in offset["offsets"].items()}


def _path(value: str) -> Any:
    from pathlib import Path

    return Path(value)
