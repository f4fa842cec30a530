"""The control plane: job models, checkpoints, scaling events and metrics in Delta tables.

Every table is written with the ``deltalake`` package (no Spark) under
``<home>/control/<table>/`` and is created lazily, with an explicit schema, by
its first write.

Why the tables are append-only. delta-rs retries no conflicting MERGE or
UPDATE, and a control plane is written by several processes at once (the
driver after every batch, Airflow tasks between them). Blind appends never
conflict, so each fact is a new row and readers pick the latest row:

* job_models: a ``planned`` row per version (with the model JSON) and an
  ``activated`` row per activation. The active version is the one of the
  latest ``activated`` row, so a crash between planning N+1 and activating
  it leaves N active, and a rollback is just another activation. "Latest"
  is the row's ``activation`` number (1, 2, ...), not its clock: activations
  by machines whose clocks disagree still order correctly.
* checkpoints: a row per (SSP, key bucket) per batch; the latest checkpoint of
  a bucket is its row with the highest ``batch_id`` (ties: the latest
  ``written_at``). A rescale writes the new model's migrated start offsets as
  batch ``-1``, so every model version covers its whole key space from the
  moment it exists.
* scaling_events: a row per status change of an event; the latest row per
  ``event_id`` is the event's state.
* metrics: long and narrow (one value per row), so a new metric needs no
  schema change.

Where two writers must not both win, the commit carries a Delta application
transaction (``plan:<job>``, ``activate:<job>``): delta-rs rejects a commit
whose app id a concurrent commit also set, so two planners saving the same
job race into one success and one clear error instead of two version-N rows.

Every table is partitioned by ``job``: every read is about one job, so log
replay prunes the other jobs' files without opening them, ``jobs()`` comes
from the partition listing alone, and per-job retention or compaction touches
one folder. Within a job, files carry min/max statistics, so filters on
``model_version`` or ``batch_id`` prune files too.

Timestamps are UTC microseconds and strictly increase within a process, so
"latest written" is never a tie for rows this process wrote.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.schema import Schema as DeltaSchema

from pipelines.control.home import Home
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStreamPartition, validate_name
from pipelines.deltaio import read_delta
from pipelines.errors import ConfigError, ModelError, UnknownJobError

if TYPE_CHECKING:
    import pandas as pd

TIMESTAMP = pa.timestamp("us", tz="UTC")
WHOLE_PARTITION = -1
"""``key_bucket`` of a checkpoint for a whole partition (factor 1, an SSP without a bucket).

Not NULL: SQL GROUP BY and joins, and pandas ``groupby``, treat NULL keys
specially; -1 is an ordinary value everywhere and can never be a real bucket.
"""
INITIAL_BATCH = -1
"""``batch_id`` of the start checkpoints a rescale writes for a new model version."""

PLANNED = "planned"
ACTIVATED = "activated"


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    description: str
    append_only: bool = False
    partition_by: tuple[str, ...] = ("job",)


def _f(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


JOB_MODELS = TableSpec(
    "job_models",
    pa.schema(
        [
            _f("job", pa.string()),
            _f("version", pa.int64()),
            _f("event", pa.string()),  # "planned" | "activated"
            _f("reason", pa.string()),
            _f("factor", pa.int32()),
            _f("grouper", pa.string()),
            _f("task_count", pa.int32()),
            _f("container_count", pa.int32()),
            _f("model", pa.string(), nullable=True),  # JobModel JSON, on planned rows only
            _f("activation", pa.int64(), nullable=True),  # 1, 2, ... on activated rows only
            _f("created_at", TIMESTAMP),
        ]
    ),
    "Every version of every job model (planned rows) and every activation; the latest activation is in force",
    # The history is the SEP-5 coordinator stream: losing rows would lose the previous SSP -> task mapping.
    append_only=True,
)

CHECKPOINTS = TableSpec(
    "checkpoints",
    pa.schema(
        [
            _f("job", pa.string()),
            _f("model_version", pa.int64()),
            _f("system", pa.string()),
            _f("stream", pa.string()),
            _f("partition", pa.int32()),
            _f("key_bucket", pa.int32()),  # -1: the whole partition
            _f("factor", pa.int32()),
            _f("offset", pa.string()),  # next offset to read, in the input system's own format
            _f("batch_id", pa.int64()),  # -1: start checkpoints written by a rescale
            _f("written_at", TIMESTAMP),
        ]
    ),
    "Next offset to read per job, model version, (SSP, key bucket); latest = highest batch_id",
)

SCALING_EVENTS = TableSpec(
    "scaling_events",
    pa.schema(
        [
            _f("job", pa.string()),
            _f("event_id", pa.string()),
            _f("kind", pa.string()),
            _f("status", pa.string()),
            _f("from_version", pa.int64(), nullable=True),
            _f("to_version", pa.int64(), nullable=True),
            _f("from_factor", pa.int32(), nullable=True),
            _f("to_factor", pa.int32(), nullable=True),
            _f("started_at", TIMESTAMP),
            _f("finished_at", TIMESTAMP, nullable=True),
            _f("details", pa.string(), nullable=True),  # JSON object
            _f("recorded_at", TIMESTAMP),
        ]
    ),
    "Rescales and partition changes; one row per status change, the latest row per event_id is its state",
)

METRICS = TableSpec(
    "metrics",
    pa.schema(
        [
            _f("job", pa.string()),
            _f("model_version", pa.int64()),
            _f("batch_id", pa.int64()),
            _f("task", pa.string(), nullable=True),  # virtual task name; NULL for job-wide metrics
            _f("metric", pa.string()),
            _f("value", pa.float64()),
            _f("at", TIMESTAMP),
        ]
    ),
    "One metric value per row (long and narrow), per job, model version, batch and virtual task",
)

DQ_RESULTS = TableSpec(
    "dq_results",
    pa.schema(
        [
            _f("job", pa.string()),
            _f("window", pa.string()),  # "run:<id>" or "event:<scaling event id>"
            _f("check", pa.string()),  # no_loss | no_duplicates | key_order | routing | dead_letters
            _f("success", pa.bool_()),
            _f("observed", pa.int64()),  # offending rows (dead_letters: the count)
            _f("checked", pa.int64()),  # rows or records the check looked at
            _f("examples", pa.string(), nullable=True),  # first offenders, named by key and offset
            _f("run_at", TIMESTAMP),
        ]
    ),
    "Data-quality verdicts: one row per check per validated window (a run or a scaling event)",
    append_only=True,
)

TABLES: tuple[TableSpec, ...] = (JOB_MODELS, CHECKPOINTS, SCALING_EVENTS, METRICS, DQ_RESULTS)


class _Clock:
    """UTC now, strictly increasing within the process, so row order by time is never a tie here."""

    def __init__(self) -> None:
        self._last = datetime.min.replace(tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            now = datetime.now(UTC)
            if now <= self._last:
                now = self._last + timedelta(microseconds=1)
            self._last = now
            return now


_CLOCK = _Clock()
utc_now = _CLOCK.now


Where = Sequence[tuple[str, str, Any]]


class _Table:
    """One lazily created Delta table; keeps its DeltaTable and refreshes it incrementally."""

    def __init__(self, spec: TableSpec, path: Path) -> None:
        self.spec = spec
        self.path = path
        self._dt: DeltaTable | None = None
        self._upgraded = False

    def load(self) -> DeltaTable | None:
        if self._dt is None:
            if not DeltaTable.is_deltatable(str(self.path)):
                return None
            self._dt = DeltaTable(self.path)
        else:
            self._dt.update_incremental()
        return self._dt

    def ensure(self) -> DeltaTable:
        dt = self.load()
        if dt is not None:
            if not self._upgraded:
                self._upgrade(dt)
            return dt
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            DeltaTable.create(
                self.path,
                self.spec.schema,
                mode="ignore",
                partition_by=list(self.spec.partition_by),
                name=self.spec.name,
                description=self.spec.description,
                configuration={"delta.appendOnly": "true"} if self.spec.append_only else None,
            )
        except DeltaError:
            if not DeltaTable.is_deltatable(str(self.path)):
                raise
            # another process created it between our check and our commit: use theirs
        dt = self.load()
        assert dt is not None
        self._upgraded = True
        return dt

    def _upgrade(self, dt: DeltaTable, attempts: int = 5) -> None:
        """Add the nullable columns a newer version of this module defines to a table an older one created.

        Readers need no upgrade (they read with this module's schema, so a
        missing column reads as NULL and an unknown one is ignored); writers
        do, because delta-rs refuses to append columns the table lacks.
        """
        have = {f.name for f in dt.schema().fields}
        missing = [f for f in self.spec.schema if f.name not in have]
        required = [f.name for f in missing if not f.nullable]
        if required:
            raise ModelError(
                f"control table {self.path} lacks the required columns {required}: "
                "it was made by an incompatible version of pipelines"
            )
        if missing:
            try:
                dt.alter.add_columns(DeltaSchema.from_arrow(pa.schema(missing)).fields)
            except CommitFailedError:
                if attempts <= 1:
                    raise
                dt.update_incremental()  # another writer upgraded it (or wrote) first; check again
                self._upgrade(dt, attempts - 1)
                return
        self._upgraded = True

    def read(self, job: str, where: Where = (), columns: Sequence[str] | None = None) -> pa.Table:
        """Rows of one job matching every ``(column, op, value)``; files are pruned before they are opened."""
        dt = self.load()
        cols = list(columns) if columns is not None else self.spec.schema.names
        if dt is None:
            return self.spec.schema.empty_table().select(cols)
        return read_delta(dt, [("job", "=", job), *where], columns=cols, schema=self.spec.schema)

    def jobs(self) -> set[str]:
        dt = self.load()
        if dt is None:
            return set()
        return {p["job"] for p in dt.partitions() if p.get("job")}

    def append(
        self, rows: list[dict[str, Any]], *, dt: DeltaTable | None = None, txn: Transaction | None = None
    ) -> None:
        """One Delta commit; with ``txn`` a concurrent commit carrying the same app id makes this one fail."""
        data = pa.Table.from_pylist(rows, schema=self.spec.schema)
        target = dt if dt is not None else self.ensure()
        props = CommitProperties(app_transactions=[txn]) if txn is not None else None
        write_deltalake(target, data, mode="append", commit_properties=props)


@dataclass(frozen=True)
class ScalingEvent:
    """One rescale or partition change; record it at start and again when it ends."""

    job: str
    event_id: str
    kind: str
    status: str
    started_at: datetime
    from_version: int | None = None
    to_version: int | None = None
    from_factor: int | None = None
    to_factor: int | None = None
    finished_at: datetime | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, job: str, kind: str, **fields: Any) -> ScalingEvent:
        return cls(job=job, event_id=uuid.uuid4().hex, kind=kind, status="started", started_at=utc_now(), **fields)

    def finish(self, status: str, **details: Any) -> ScalingEvent:
        """The same event, ended; ``details`` are merged into the ones recorded at start."""
        return replace(self, status=status, finished_at=utc_now(), details={**self.details, **details})


class ControlPlane:
    """The durable state every process of a deployment shares.

    Instances are cheap and hold no lock on the tables: any number of
    processes may open the same home. An instance keeps its DeltaTable
    handles and refreshes them before each read, so it sees other processes'
    commits. Not meant to be shared between threads.
    """

    def __init__(self, home: Home) -> None:
        self.home = home
        self._tables = {spec.name: _Table(spec, home.control_table(spec.name)) for spec in TABLES}

    # ------------------------------------------------------------------ job models

    def save_job_model(self, model: JobModel, reason: str) -> None:
        """Store a planned version; versions of a job only grow and are never overwritten."""
        job = validate_name("job", model.job_name)
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"saving version {model.version} of job {job!r} needs a reason (why it was planned)")
        text = model.dumps()
        JobModel.loads(text)  # write only what reads back
        table = self._tables[JOB_MODELS.name]
        dt = table.ensure()
        planned = self._planned_versions(job)
        if model.version in planned:
            raise ModelError(
                f"job {job!r} already has a model version {model.version}; versions are never overwritten, "
                f"plan version {max(planned) + 1} instead"
            )
        if planned and model.version < max(planned):
            raise ModelError(
                f"job {job!r} is at model version {max(planned)}; version {model.version} would go back in history, "
                f"plan version {max(planned) + 1} instead"
            )
        row = self._model_row(model, PLANNED, reason.strip(), text)
        try:
            table.append([row], dt=dt, txn=Transaction(f"plan:{job}", model.version))
        except CommitFailedError as e:
            raise ModelError(
                f"another process saved a model of job {job!r} at the same time ({e}); "
                "read the latest version and plan again"
            ) from None

    def activate(self, job: str, version: int, reason: str = "") -> None:
        """Put a saved version in force; it must load, so a corrupt model is never activated.

        The activation number is the count of earlier activations plus one,
        read at the snapshot this commit builds on; the ``activate:<job>`` app
        transaction makes a concurrent activation fail rather than reuse it.
        """
        model = self.job_model(job, version)
        table = self._tables[JOB_MODELS.name]
        dt = table.ensure()
        number = max((r["activation"] or 0 for r in self._activations(job)), default=0) + 1
        row = self._model_row(model, ACTIVATED, reason.strip() or f"activate version {version}", None)
        row["activation"] = number
        try:
            table.append([row], dt=dt, txn=Transaction(f"activate:{job}", number))
        except CommitFailedError as e:
            raise ModelError(
                f"another process activated a model of job {job!r} at the same time ({e}); check which is active"
            ) from None

    def active_version(self, job: str) -> int | None:
        activations = self._activations(job)
        return activations[-1]["version"] if activations else None

    def active_model(self, job: str) -> JobModel:
        version = self.active_version(job)
        if version is None:
            planned = self._planned_versions(job)
            if not planned:
                raise self._unknown_job(job)
            raise ModelError(
                f"job {job!r} has planned model versions {_join(sorted(planned))} but none was activated yet"
            )
        return self.job_model(job, version)

    def job_model(self, job: str, version: int) -> JobModel:
        """A stored version, parsed; a corrupt row is reported with its job and version."""
        _check_int("model version", version, 0)
        rows = (
            self._tables[JOB_MODELS.name]
            .read(job, [("event", "=", PLANNED), ("version", "=", version)], ["model", "created_at"])
            .sort_by("created_at")
            .to_pylist()
        )
        if not rows:
            planned = self._planned_versions(job)
            if not planned:
                raise self._unknown_job(job)
            raise ModelError(f"job {job!r} has no model version {version}; its versions are {_join(sorted(planned))}")
        # Two planned rows of one version can only come from a writer that bypassed save_job_model's
        # app-transaction guard; the first one written is the one anyone could have activated.
        text = rows[0]["model"]
        where = f"stored job model of job {job!r} version {version}"
        if text is None:
            raise ModelError(f"{where} has no model JSON")
        try:
            model = JobModel.loads(text)
        except ModelError as e:
            raise ModelError(f"{where} is corrupt: {e}") from None
        if model.job_name != job or model.version != version:
            raise ModelError(f"{where} holds job {model.job_name!r} version {model.version} instead")
        return model

    def latest_version(self, job: str) -> int | None:
        planned = self._planned_versions(job)
        return max(planned) if planned else None

    def model_history(self, job: str) -> list[dict[str, Any]]:
        """Every planned and activated row of the job, oldest first; ``active`` marks the activation in force."""
        events = self._events(job)
        if not events:
            raise self._unknown_job(job)
        activations = [r for r in events if r["event"] == ACTIVATED]
        in_force = max(activations, key=_activation_order) if activations else None
        return [{**r, "active": r is in_force} for r in events]

    def jobs(self) -> list[str]:
        return sorted(self._tables[JOB_MODELS.name].jobs())

    # ------------------------------------------------------------------ checkpoints

    def write_checkpoints(self, job: str, version: int, checkpoints: CheckpointMap, batch_id: int) -> None:
        """Append one batch's checkpoints in one commit; partial maps (only advanced buckets) are fine."""
        validate_name("job", job)
        _check_int("model version", version, 0)
        _check_int("batch id", batch_id, INITIAL_BATCH)
        factor = checkpoints.factor
        if not checkpoints.offsets:
            raise ModelError(f"no checkpoints to write for job {job!r} version {version} batch {batch_id}")
        now = utc_now()
        rows = []
        for ssp, offset in checkpoints.offsets.items():
            if factor > 1 and ssp.key_bucket is None:
                raise ModelError(f"checkpoint for {ssp} needs a key bucket: the factor is {factor}")
            bucket = WHOLE_PARTITION if factor == 1 else ssp.key_bucket
            if bucket >= factor:
                raise ModelError(f"checkpoint for {ssp} has key bucket >= factor {factor}")
            if not isinstance(offset, str) or not offset:
                raise ModelError(f"checkpoint for {ssp} must have a non-empty string offset, got {offset!r}")
            rows.append(
                {
                    "job": job,
                    "model_version": version,
                    "system": ssp.system,
                    "stream": ssp.stream,
                    "partition": ssp.partition,
                    "key_bucket": bucket,
                    "factor": factor,
                    "offset": offset,
                    "batch_id": batch_id,
                    "written_at": now,
                }
            )
        self._tables[CHECKPOINTS.name].append(rows)

    def latest_checkpoints(self, job: str, version: int) -> CheckpointMap:
        """The next offset of every (SSP, key bucket) of one model version: its latest row each."""
        rows = self._checkpoint_rows(job, version)
        if rows.num_rows == 0:
            raise ModelError(
                f"job {job!r} model version {version} has no checkpoints; a version gets its start checkpoints "
                "(batch -1) when it is planned, so it was planned outside a rescale or the rescale did not finish"
            )
        latest: dict[tuple[str, str, int, int], tuple[int, str]] = {}
        for r in rows.sort_by([("batch_id", "ascending"), ("written_at", "ascending")]).to_pylist():
            latest[(r["system"], r["stream"], r["partition"], r["key_bucket"])] = (r["factor"], r["offset"])
        factors = {f for f, _ in latest.values()}
        if len(factors) != 1:
            raise ModelError(f"checkpoints of job {job!r} version {version} mix elasticity factors {sorted(factors)}")
        offsets = {
            SystemStreamPartition(s, st, p, None if b == WHOLE_PARTITION else b): off
            for (s, st, p, b), (_, off) in latest.items()
        }
        result = CheckpointMap(factors.pop(), offsets)
        try:
            result.check_complete()
        except ModelError as e:
            raise ModelError(f"checkpoints of job {job!r} version {version} are incomplete: {e}") from None
        return result

    def latest_checkpoint_batch(self, job: str, version: int) -> int | None:
        """The highest batch whose checkpoints are stored (-1: only the start checkpoints), None if none."""
        rows = self._checkpoint_rows(job, version, ["batch_id"])
        return max(rows.column("batch_id").to_pylist()) if rows.num_rows else None

    # ------------------------------------------------------------------ scaling events

    def record_scaling_event(self, event: ScalingEvent) -> None:
        validate_name("job", event.job)
        row = {
            "job": event.job,
            "event_id": event.event_id,
            "kind": event.kind,
            "status": event.status,
            "from_version": event.from_version,
            "to_version": event.to_version,
            "from_factor": event.from_factor,
            "to_factor": event.to_factor,
            "started_at": event.started_at,
            "finished_at": event.finished_at,
            "details": json.dumps(dict(event.details), default=str, sort_keys=True),
            "recorded_at": utc_now(),
        }
        self._tables[SCALING_EVENTS.name].append([row])

    def scaling_events(self, job: str) -> list[ScalingEvent]:
        """Each event's latest state, oldest event first."""
        table = self._tables[SCALING_EVENTS.name].read(job).sort_by("recorded_at")
        latest: dict[str, dict[str, Any]] = {}
        for r in table.to_pylist():
            latest[r["event_id"]] = r
        events = []
        for r in sorted(latest.values(), key=lambda r: (r["started_at"], r["event_id"])):
            r.pop("recorded_at")
            r["details"] = json.loads(r["details"]) if r["details"] else {}
            events.append(ScalingEvent(**r))
        return events

    # ------------------------------------------------------------------ data quality

    def append_dq_results(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """One commit for one validation's verdicts: job, window, check, success, observed, checked, examples?."""
        now = utc_now()
        prepared = [{"examples": None, "run_at": now, **row} for row in rows]
        for row in prepared:
            validate_name("job", row["job"])
        if prepared:
            self._tables[DQ_RESULTS.name].append(prepared)

    def read_dq_results(self, job: str) -> pd.DataFrame:
        return self._tables[DQ_RESULTS.name].read(job).to_pandas().sort_values("run_at", kind="stable")

    # ------------------------------------------------------------------ metrics

    def append_metrics(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """One commit for a batch of metric values: job, model_version, batch_id, task?, metric, value, at?."""
        now = utc_now()
        allowed = set(METRICS.schema.names)
        prepared = []
        for i, row in enumerate(rows):
            unknown = set(row) - allowed
            missing = {"job", "model_version", "batch_id", "metric", "value"} - set(row)
            if unknown or missing:
                raise ConfigError(
                    f"metric row #{i} has unknown fields {sorted(unknown)} / lacks {sorted(missing)}; "
                    f"fields are {METRICS.schema.names}"
                )
            validate_name("job", row["job"])
            prepared.append({"task": None, "at": now, **row, "value": float(row["value"])})
        if prepared:
            self._tables[METRICS.name].append(prepared)

    def read_metrics(
        self,
        job: str,
        *,
        model_version: int | None = None,
        metrics: Iterable[str] | None = None,
        since_batch: int | None = None,
    ) -> pd.DataFrame:
        """A job's metric rows, oldest first, narrowed by version, metric names and first batch."""
        where: list[tuple[str, str, Any]] = []
        if model_version is not None:
            where.append(("model_version", "=", model_version))
        if metrics is not None:
            where.append(("metric", "in", sorted(set(metrics))))
        if since_batch is not None:
            where.append(("batch_id", ">=", since_batch))
        table = self._tables[METRICS.name].read(job, where)
        return table.sort_by([("at", "ascending"), ("batch_id", "ascending")]).to_pandas()

    # ------------------------------------------------------------------ helpers

    def _events(self, job: str) -> list[dict[str, Any]]:
        columns = [n for n in JOB_MODELS.schema.names if n != "model"]
        return self._tables[JOB_MODELS.name].read(job, columns=columns).sort_by("created_at").to_pylist()

    def _activations(self, job: str) -> list[dict[str, Any]]:
        """Activated rows, the one in force last."""
        columns = ["version", "activation", "created_at"]
        rows = self._tables[JOB_MODELS.name].read(job, [("event", "=", ACTIVATED)], columns).to_pylist()
        return sorted(rows, key=_activation_order)

    def _planned_versions(self, job: str) -> set[int]:
        table = self._tables[JOB_MODELS.name].read(job, [("event", "=", PLANNED)], ["version"])
        return set(table.column("version").to_pylist())

    def start_checkpoints(self, job: str, version: int) -> dict[SystemStreamPartition, str]:
        """Where a version started reading, per (SSP, key bucket): its latest start-checkpoint row (batch -1).

        A rescale writes the migrated start, and a driver that switches in place
        rewrites it from the old model's final checkpoints (``carry_forward``);
        the rewrite is where the version really started, and the superseded row
        may lie far behind it.
        """
        where = [("model_version", "=", version), ("batch_id", "=", INITIAL_BATCH)]
        rows = self._tables[CHECKPOINTS.name].read(job, where).sort_by("written_at").to_pylist()
        return {
            SystemStreamPartition(
                r["system"],
                r["stream"],
                r["partition"],
                None if r["key_bucket"] == WHOLE_PARTITION else r["key_bucket"],
            ): r["offset"]
            for r in rows  # oldest first: the latest row of each bucket wins
        }

    def _checkpoint_rows(self, job: str, version: int, columns: Sequence[str] | None = None) -> pa.Table:
        return self._tables[CHECKPOINTS.name].read(job, [("model_version", "=", version)], columns)

    def _model_row(self, model: JobModel, event: str, reason: str, text: str | None) -> dict[str, Any]:
        return {
            "job": model.job_name,
            "version": model.version,
            "event": event,
            "reason": reason,
            "factor": model.elasticity_factor,
            "grouper": model.grouper,
            "task_count": model.task_count,
            "container_count": len(model.containers),
            "model": text,
            "activation": None,
            "created_at": utc_now(),
        }

    def _unknown_job(self, job: str) -> UnknownJobError:
        known = self.jobs()
        listing = f"known jobs: {_join(known)}" if known else "no job has a model yet"
        return UnknownJobError(f"job {job!r} has no job model in {self.home.control}; {listing}")


def _activation_order(row: Mapping[str, Any]) -> tuple[int, datetime]:
    # Rows written around this API (no number) sort by time before numbered ones.
    return (row["activation"] or 0, row["created_at"])


def _join(items: Iterable[object]) -> str:
    return ", ".join(str(i) for i in items)


def _check_int(what: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{what} must be a whole number >= {minimum}, got {value!r}")
