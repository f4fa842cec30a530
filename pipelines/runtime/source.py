"""The elastic streaming source: one Spark input partition per virtual task per micro-batch.

Offsets (Spark's, per micro-batch; ``runtime.offsets``) are the next
position to read of every (SSP, key bucket) of the job model the query runs,
so a batch's end offsets are exactly the checkpoints the sink appends when
it commits the batch. Positions are the input systems' own, opaque here: the
source only asks the systems (``InputSystem``) and the pure batch plan
(``pipelines.core.batchplan``) about them.

Spark runs this reader in two places: a long-lived driver-side runner calls
``initialOffset``/``latestOffset``/``partitions``, and ``read`` runs on
executors on an unpickled copy of another reader instance. So nothing
``read`` needs may live in reader state: each ``TaskRange`` carries it all.

Planning a batch (``latestOffset``, on the driver):

* every partition's floor is its slowest key bucket;
* the systems say how far each partition may be read now (its end, or a
  hold-back: a partition created by an expansion waits until its source is
  read past the expansion point) and, where they can count, how many records
  wait;
* the budget (``maxRecords``: ``batch.max_records`` times the factor) is
  water-filled over the partitions (``share_budget``), and the systems turn
  each partition's share into an end position, or a bounded end they name by
  reading (Kinesis), which the first read pins (``runtime.fetch``);
* all key buckets of a partition advance to its end together, so a bucket
  that never receives a record does not pin its checkpoint in the past.

Reading happens in the sink's writer (``runtime.reading``): ``read`` hands
on each task's ``TaskRange`` as one row, so records never cross the JVM.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pipelines.core.batchplan import PartitionView, plan_batch
from pipelines.core.metric_names import OUTAGE_BACK, OUTAGE_DOWN
from pipelines.core.model import JobModel
from pipelines.core.positions import Bounded, End, Position
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.errors import InputRewoundError, StreamError
from pipelines.runtime import fetch, heap, requests, schemas
from pipelines.runtime.offsets import BatchOffsets, Offset, Pending, encode
from pipelines.runtime.outage import InputOutage
from pipelines.runtime.reading import SspRange, TaskRange, describe
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem, SupportsRelayout, check_not_rewound
from pipelines.systems.identity import check_same_streams, identities, recorded

if TYPE_CHECKING:
    from pipelines.jobs.config import JobConfig

_STORES_KEY = "stores"
"""``adjunct.runtime.OFFSET_KEY`` (not imported: the source runner starts light)."""
_STATE_KEY = "state"
"""``state.task.OFFSET_KEY``."""

IDENTITY_CHECK_S = 10.0
"""How often a running query asks its inputs' ids (a Kafka metadata request, a Delta log read): a stream deleted
and created again is a rare operator's act, and the ends catch the new stream sooner while it is below the
checkpoints."""

_REMEDY = (
    "To read the stream as it is now, create a job for it afresh (pipelines job create, with its own name and sink)"
)


class ElasticSource(DataSource):
    """``spark.readStream.format("elastic").option("home", ...).option("job", ...).option("modelVersion", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "elastic"

    def schema(self) -> StructType:
        return schemas.TASKS

    def streamReader(self, schema: StructType) -> ElasticReader:
        return ElasticReader(self.options)


class ElasticReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Any) -> None:
        self.home = Home(options["home"])
        self.job = options["job"]
        self.version = int(options["modelVersion"])
        self.max_records = int(options.get("maxRecords", "10000"))
        self._model: JobModel | None = None
        self._settings: dict[str, dict[str, Any]] | None = None
        self._target: dict[SystemStreamPartition, Position] | None = None
        self._batches = 0
        self._outage = InputOutage()
        self._identities_checked: float | None = None
        self._gate: str | None = options.get("gate")
        if _in_source_runner():
            _pandas_only_when_asked()

    # ------------------------------------------------------------ driver side

    def model(self) -> JobModel:
        if self._model is None:
            from pipelines.control import ControlPlane

            self._model = ControlPlane(self.home).job_models.get(self.job, self.version)
        return self._model

    def settings(self) -> dict[str, dict[str, Any]]:
        if self._settings is None:
            from pipelines.jobs.config import job_config

            self._settings = {k: dict(v) for k, v in job_config(self.model()).systems.items()}
        return self._settings

    def _pass_gate(self) -> None:
        """A query started ahead of an in-place switch waits here until its driver lets it go
        (``runtime.gate``): nothing is planned or read before the old query stopped."""
        if self._gate is not None:
            from pipelines.runtime.gate import wait_open

            self._warm_up()
            wait_open(self._gate, f"job {self.job} v{self.version}")
            self._gate = None

    def _warm_up(self) -> None:
        """Before the gate, what the first plan needs and no position depends on: the model, the inputs' clients,
        the states' table handles (each access refreshes them: the plan after the gate reads the commits since)."""
        for stream in self._streams():
            self._system(stream.system).connect()
        config = self._config()
        if config.state:
            from pipelines.state.runtime import tables_for

            for spec in config.state:
                tables_for(self.home, config.name, spec).changes()
        if config.stores:
            import pipelines.adjunct.runtime  # noqa: F401  (its opening reads the stores' checkpoints: after the gate)

    def _config(self) -> JobConfig:
        config: JobConfig | None = self.__dict__.get("_job_config")
        if config is None:
            from pipelines.jobs.config import job_config

            config = self.__dict__["_job_config"] = job_config(self.model())
        return config

    def initialOffset(self) -> dict[str, Any]:
        """The model's latest checkpoints in the control plane: its start checkpoints, or where it stopped."""
        from pipelines.control import ControlPlane

        self._pass_gate()
        checkpoints = ControlPlane(self.home).checkpoints.latest(self.job, self.version)
        positions = {ssp: checkpoints.offset(ssp, ssp.key_bucket or 0) for ssp in self.model().ssp_to_task()}
        fetch.collect_pins(self.home, self.job, self.version, keep=set())
        return encode(BatchOffsets(self.version, positions))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of "everything available now" once, so a trigger-available-now run terminates."""
        self._pass_gate()
        self._target = {}
        for stream in self._streams():
            for p, end in self._system(stream.system).end_positions(stream.stream).items():
                self._target[SystemStreamPartition(stream.system, stream.stream, p)] = end

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._pass_gate()
        if requests.draining(self.home, self.job, self.version):
            return start  # the driver is stopping this query between batches: admit nothing new
        begun = BatchOffsets.from_json(start)
        positions = {ssp: self._resolve(offset) for ssp, offset in begun.positions.items()}
        budget = self.max_records
        if isinstance(limit, ReadAllAvailable):
            budget = 1 << 62
        elif isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        try:
            planned = self._plan(positions, budget)
        except InputRewoundError:
            raise  # the input is not down, it is another one: the query fails with no batch committed
        except StreamError as e:  # an input that does not answer (a broker down): wait for it, never fail
            self._input_failed(e)
            return start
        lasted = self._outage.answered()
        if lasted is not None:
            print(f"[{self.job}] v{self.version}: input answers again after {lasted:.1f}s", flush=True)
            self._report(OUTAGE_BACK, lasted)
        ends: dict[SystemStreamPartition, Offset] = {}
        pins: dict[SystemStreamPartition, Pending] = {}  # one Pending per partition, shared by its buckets
        for ssp, end in planned.items():
            if isinstance(end, Bounded):
                whole = ssp.whole()
                ends[ssp] = pins.get(whole) or pins.setdefault(whole, Pending.new(end))
            elif end == positions[ssp]:
                ends[ssp] = begun.positions[ssp]  # unchanged: keep its form, so an idle source reads as no data
            else:
                ends[ssp] = end
        self._batches += 1
        return self._with_stores(start, encode(BatchOffsets(self.version, ends)))

    def _input_failed(self, error: StreamError) -> None:
        """Wait before Spark asks again (bounded back-off), and report the outage now and then, not per try."""
        wait, report = self._outage.failed()
        if report:
            down = self._outage.down_for()
            print(
                f"[{self.job}] v{self.version}: input unavailable for {down:.1f}s ({self._outage.failures} tries), "
                f"no new batch until it answers; next try in {wait:.1f}s: {error}",
                flush=True,
            )
            self._report(OUTAGE_DOWN, down)
        time.sleep(wait)

    def _report(self, metric: str, value: float) -> None:
        """A job-wide metric row from the driver (the sink reports per batch, and there is no batch now)."""
        from pipelines.control import ControlPlane

        try:
            row = {"job": self.job, "model_version": self.version, "batch_id": -1, "metric": metric, "value": value}
            ControlPlane(self.home).metrics.append([row])
        except Exception as e:  # a report must never take the job down
            print(f"[{self.job}] could not record {metric}: {e}", flush=True)

    def _with_stores(self, start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
        """Adjunct stores and keyed state: ingest the stores and name the store versions and state segments this
        batch sees in its end offset (Spark logs it before the batch runs, so a replay sees the same).

        An idle main input keeps ``start`` as it is, so a store that moved alone never makes an empty batch.
        """
        config = self._config()
        if not config.stores and not config.state:
            return end
        if end == {k: v for k, v in start.items() if k not in (_STORES_KEY, _STATE_KEY)}:
            return start
        if config.stores:
            from pipelines.adjunct.runtime import driver_versions

            end[_STORES_KEY] = driver_versions(self.home, config)
        if config.state:
            from pipelines.state.runtime import driver_versions as state_versions

            end[_STATE_KEY] = state_versions(self.home, config.name, config.state)
        return end

    def _check_identities(self) -> None:
        """The inputs are the streams the model was planned over (``systems.identity``), asked at most every
        ``IDENTITY_CHECK_S``: a stream made again and grown past the checkpoints is invisible in its ends."""
        now = time.monotonic()
        if self._identities_checked is not None and now - self._identities_checked < IDENTITY_CHECK_S:
            return
        model = self.model()
        was = recorded(model)
        if was:
            streams = [s for s in self._streams() if str(s) in was]
            then = f"the job stops rather than read another stream from them. {_REMEDY}"
            check_same_streams(self.job, self.version, was, identities(self._system, streams), then)
        self._identities_checked = now

    def _plan(self, positions: Mapping[SystemStreamPartition, Position], budget: int) -> dict[Any, End]:
        self._check_identities()
        by_stream: dict[SystemStream, dict[int, dict[SystemStreamPartition, Position]]] = {}
        for ssp, position in positions.items():
            by_stream.setdefault(ssp.system_stream, {}).setdefault(ssp.partition, {})[ssp] = position
        views: dict[tuple[SystemStream, int], PartitionView[SystemStreamPartition]] = {}
        for stream, partitions in by_stream.items():
            system = self._system(stream.system)
            floors = {p: min(buckets.values(), key=system.position_key) for p, buckets in partitions.items()}
            limits = system.read_limits(stream.stream, floors)
            ends = system.end_positions(stream.stream)
            if not isinstance(system, SupportsRelayout):  # slotted positions have no such order: nothing to decode
                ahead = {p: max(buckets.values(), key=system.position_key) for p, buckets in partitions.items()}
                check_not_rewound(
                    system,
                    stream.stream,
                    ahead,
                    ends,
                    reader="the job's checkpoint",
                    then="the job stops rather than skip what the partition holds now below its checkpoint "
                    f"(Spark's failOnDataLoss). {_REMEDY}",
                )
            for p, buckets in partitions.items():
                available = ends.get(p, floors[p])
                readable: Position | None = available
                if p in limits:
                    limit = limits[p]
                    readable = None if limit is None else _earlier(system, limit, available)
                whole = SystemStreamPartition(stream.system, stream.stream, p)
                target = self._target.get(whole) if self._target else None
                if readable is not None and target is not None:
                    if system.reached(stream.stream, p, floors[p], target):
                        readable = None  # everything available at the start of this run is read
                    else:
                        readable = _earlier(system, target, readable)
                backlog = None
                if readable is not None:
                    backlog = system.records_between(stream.stream, p, floors[p], readable)
                    if backlog == 0:
                        readable = None
                views[(stream, p)] = PartitionView(floors[p], buckets, readable, backlog)

        def advance(admit: Mapping[Any, int]) -> dict[Any, End]:
            result: dict[Any, End] = {}
            for stream in {s for s, _ in admit}:
                mine = {p: n for (s, p), n in admit.items() if s == stream}
                system = self._system(stream.system)
                # Every partition's floor, not only the admitted ones': a Kinesis slot's plan (which child
                # shards it takes over) must see what every other slot of the stream holds.
                floors = {p: views[(s, p)].floor for s, p in views if s == stream}
                # plan_batch admits only partitions with something readable: every one has its limit
                limits = {p: r for p in mine if (r := views[(stream, p)].readable) is not None}
                for p, end in system.advance(stream.stream, floors, mine, limits).items():
                    result[(stream, p)] = end
            return result

        def key(partition: Any) -> Any:
            return self._system(partition[0].system).position_key

        return plan_batch(views, budget, advance, key, rotation=self._batches)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[TaskRange]:
        self._pass_gate()  # a batch its offset log planned before is run again without latestOffset
        first = BatchOffsets.from_json(start)
        last = BatchOffsets.from_json(end)
        resolved = {ssp: self._resolve(o) for ssp, o in first.positions.items()}
        floors: dict[SystemStreamPartition, Position] = {}
        for ssp, position in resolved.items():
            system = self._system(ssp.system)
            whole = ssp.whole()
            if whole not in floors or system.position_key(position) < system.position_key(floors[whole]):
                floors[whole] = position
        model = self.model()
        shared = model.elasticity_factor > 1
        tasks = []
        for task in model.tasks():
            ranges = []
            for s in sorted(task.ssps, key=lambda s: (s.partition, s.stream, s.system)):
                stop = last.positions[s]
                if not isinstance(stop, Pending) and stop == resolved[s]:
                    continue  # this bucket does not move in this batch
                ranges.append(
                    SspRange(
                        s.wire(),
                        floors[s.whole()],
                        resolved[s],
                        stop.to_json() if isinstance(stop, Pending) else stop,
                    )
                )
            if ranges:
                tasks.append(
                    TaskRange(
                        str(self.home.root),
                        self.job,
                        self.version,
                        model.elasticity_factor,
                        task.task_name.name,
                        ranges,
                        self.settings(),
                        shared,
                        end.get(_STORES_KEY),
                        end.get(_STATE_KEY),
                    )
                )
        return tasks

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing: Spark calls this one batch late and never for the last batch; the sink writes checkpoints."""

    def stop(self) -> None:
        for system in self.__dict__.get("_systems", {}).values():
            system.close()
        _end_runner_quietly_if_its_query_stopped()

    def _resolve(self, offset: Offset) -> Position:
        return fetch.resolve(self.home, self.job, self.version, offset)

    def _streams(self) -> set[SystemStream]:
        return {w.system_stream for w in self.model().whole_ssps()}

    def _system(self, name: str) -> InputSystem:
        """Input-system clients, kept for the life of the driver-side runner (they cache metadata)."""
        from pipelines.systems.registry import open_system

        systems: dict[str, InputSystem] = self.__dict__.setdefault("_systems", {})
        if name not in systems:
            systems[name] = open_system(name, self.home, self.settings().get(name))
        return systems[name]

    # ------------------------------------------------------------ executor side

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """One row naming the virtual task and carrying its ``TaskRange``: the sink's writer reads the records.

        Records yielded here would cross the JVM (Arrow -> Spark rows ->
        Arrow) on their way to the writer's Python worker, which cost a cheap
        job more CPU than its own processing. The descriptor is all a task
        needs (see ``TaskRange``), so the writer's worker fetches, routes and
        processes in one place (``runtime.reading``). The price: Spark's
        ``numInputRows`` counts virtual tasks; records are in the metrics
        table (``records_in``, ``records_fetched``).
        """
        if not isinstance(partition, TaskRange):  # Spark hands back what ``partitions`` made
            raise TypeError(f"expected a TaskRange, got {type(partition).__name__}")
        row = {"virtual_task": partition.task_name, "model_version": partition.model_version}
        yield pa.RecordBatch.from_pylist([{**row, "task": describe(partition)}], schema=schemas.arrow(schemas.TASKS))
        heap.settle()


_SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def _in_source_runner() -> bool:
    """True in Spark's source runner: the driver-side process that plans a query's batches with our reader."""
    main = sys.modules.get("__main__")
    return getattr(getattr(main, "__spec__", None), "name", None) == _SOURCE_RUNNER


def _pandas_only_when_asked() -> None:
    """Keep pyarrow from importing pandas merely to ask whether a value is a DataFrame.

    Spark starts a fresh Python process as each query's source runner, on the
    query's critical path: every job start and every in-place rescale waits
    for it. The first time pyarrow builds any array it imports pandas (0.35 s
    of CPU, a third of the runner's start) only to ask whether its input is a
    DataFrame, and nothing in the runner (our planning, the input systems'
    clients, the control plane) hands it one. pyarrow tries that import once
    and remembers a failure for those questions, while anything that asks for
    pandas itself (``to_pandas``) still imports it then; so that one attempt
    is made to fail here, with pandas hidden for a moment.
    """
    if "pandas" in sys.modules:
        return
    hidden = _Hidden("pandas")
    sys.meta_path.insert(0, hidden)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(hidden)


class _Hidden:
    """An import finder under which one package cannot be found."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == self.name or name.startswith(f"{self.name}."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _end_runner_quietly_if_its_query_stopped() -> None:
    """End Spark's source runner process here when the query that owned it stopped.

    Spark stops a query's runner by closing its socket and then killing it;
    a runner that reads the end of the socket first calls ``stop`` (here),
    tries to report an ``EOFError`` to the JVM that is gone, and prints two
    Python tracebacks (``EOFError``, ``BrokenPipeError``) into the driver's
    log at a clean stop, a rescale or a Ctrl-C: noise that reads like a
    failure. Only that case ends here, with status 0; any other error still
    reaches the JVM, which fails the query with it.
    """
    if not _in_source_runner():
        return
    error = sys.exc_info()[1]
    if not isinstance(error, EOFError):
        return
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or frames[-1].name != "read_int":  # the JVM's socket ended, not one of our reads
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)


def _earlier(system: InputSystem, a: Position, b: Position) -> Position:
    return a if system.position_key(a) < system.position_key(b) else b
