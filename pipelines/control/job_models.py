"""The ``job_models`` table: every version of every job model, and which one is in force.

A ``planned`` row per version (with the model JSON) and an ``activated`` row
per activation. The active version is the one of the latest ``activated``
row, so a crash between planning N+1 and activating it leaves N active, and
a rollback is just another activation. "Latest" is the row's ``activation``
number (1, 2, ...), not its clock: activations by machines whose clocks
disagree still order correctly. The history is SEP-5's coordinator stream:
the previous SSP -> task mapping is read from it, so the table is append-only.

Saving a version commits with the app transaction ``plan:<job>`` and an
activation with ``activate:<job>``: two planners (or activators) racing on
one job end in one success and one clear error, never two version-N rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa
from deltalake import Transaction
from deltalake.exceptions import CommitFailedError

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, check_int, column
from pipelines.core.limits import shown
from pipelines.core.model import JobModel
from pipelines.core.ssp import validate_name
from pipelines.errors import ConfigError, ModelError, UnknownJobError
from pipelines.storage.clock import StoreClock
from pipelines.storage.home import Home

CONFIG_KEY = "job_config"
"""Where a job model keeps the configuration it was planned from (``pipelines.jobs.config.job_config`` reads it)."""

PLANNED = "planned"
ACTIVATED = "activated"

JOB_MODELS = TableSpec(
    "job_models",
    pa.schema(
        [
            column("job", pa.string()),
            column("version", pa.int64()),
            column("event", pa.string()),  # "planned" | "activated"
            column("reason", pa.string()),
            column("factor", pa.int32()),
            column("grouper", pa.string()),
            column("task_count", pa.int32()),
            column("container_count", pa.int32()),
            column("model", pa.string(), nullable=True),  # JobModel JSON, on planned rows only
            column("activation", pa.int64(), nullable=True),  # 1, 2, ... on activated rows only
            column("created_at", TIMESTAMP),
        ]
    ),
    "Every version of every job model (planned rows) and every activation; the latest activation is in force",
    append_only=True,
)


class JobModels:
    """Versions of job models: save, activate, and read what is in force."""

    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self.home = home
        self.table = ControlTable(JOB_MODELS, home, clock)

    def save(self, model: JobModel, reason: str) -> None:
        """Store a planned version; versions of a job only grow and are never overwritten."""
        job = validate_name("job", model.job_name)
        check_reason(model, reason)
        text = model.dumps()
        JobModel.loads(text)  # write only what reads back
        try:
            with self.table.lock:  # decided and committed on one snapshot
                dt = self.table.ensure()
                planned = self.planned_versions(job)
                if model.version in planned:
                    raise ModelError(
                        f"job {job!r} already has a model version {model.version}; versions are never overwritten, "
                        f"plan version {max(planned) + 1} instead"
                    )
                if planned and model.version < max(planned):
                    raise ModelError(
                        f"job {job!r} is at model version {max(planned)}; version {model.version} would go back in "
                        f"history, plan version {max(planned) + 1} instead"
                    )
                row = self._row(model, PLANNED, reason.strip(), text)
                self.table.append([row], dt=dt, txn=Transaction(f"plan:{job}", model.version))
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
        model = self.get(job, version)
        try:
            with self.table.lock:  # the number is read on the snapshot the commit builds on
                dt = self.table.ensure()
                number = max((r["activation"] or 0 for r in self._activations(job)), default=0) + 1
                row = self._row(model, ACTIVATED, reason.strip() or f"activate version {version}", None)
                row["activation"] = number
                self.table.append([row], dt=dt, txn=Transaction(f"activate:{job}", number))
        except CommitFailedError as e:
            raise ModelError(
                f"another process activated a model of job {job!r} at the same time ({e}); check which is active"
            ) from None

    def active_version(self, job: str) -> int | None:
        activations = self._activations(job)
        return activations[-1]["version"] if activations else None

    def active(self, job: str) -> JobModel:
        """The model in force; an unknown job names the known ones."""
        version = self.active_version(job)
        if version is None:
            planned = self.planned_versions(job)
            if not planned:
                raise self.unknown_job(job)
            raise ModelError(
                f"job {job!r} has planned model versions {_join(sorted(planned))} but none was activated yet"
            )
        return self.get(job, version)

    def get(self, job: str, version: int) -> JobModel:
        """A stored version, parsed; a corrupt row is reported with its job and version."""
        check_int("model version", version, 0)
        rows = (
            self.table.read(job, [("event", "=", PLANNED), ("version", "=", version)], ["model", "created_at"])
            .sort_by("created_at")
            .to_pylist()
        )
        if not rows:
            planned = self.planned_versions(job)
            if not planned:
                raise self.unknown_job(job)
            raise ModelError(f"job {job!r} has no model version {version}; its versions are {_join(sorted(planned))}")
        # Two planned rows of one version can only come from a writer that bypassed save's
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
        planned = self.planned_versions(job)
        return max(planned) if planned else None

    def history(self, job: str) -> list[dict[str, Any]]:
        """Every planned and activated row of the job, oldest first; ``active`` marks the activation in force."""
        columns = [n for n in JOB_MODELS.schema.names if n != "model"]
        events = self.table.read(job, columns=columns).sort_by("created_at").to_pylist()
        if not events:
            raise self.unknown_job(job)
        activations = [r for r in events if r["event"] == ACTIVATED]
        in_force = max(activations, key=_activation_order) if activations else None
        return [{**r, "active": r is in_force} for r in events]

    def previous_active_version(self, job: str, version: int) -> int | None:
        """The version that was in force before ``version`` was last activated, if any."""
        activated = [r["version"] for r in self._activations(job)]
        while activated and activated[-1] == version:
            activated.pop()
        return activated[-1] if activated else None

    def jobs(self) -> list[str]:
        return sorted(self.table.jobs())

    def planned_versions(self, job: str) -> set[int]:
        table = self.table.read(job, [("event", "=", PLANNED)], ["version"])
        return set(table.column("version").to_pylist())

    def unknown_job(self, job: str) -> UnknownJobError:
        known = self.jobs()
        listing = f"known jobs: {_join(known)}" if known else "no job has a model yet"
        return UnknownJobError(f"job {shown(job)} has no job model in {self.home.control}; {listing}")

    def _activations(self, job: str) -> list[dict[str, Any]]:
        """Activated rows, the one in force last."""
        columns = ["version", "activation", "created_at"]
        rows = self.table.read(job, [("event", "=", ACTIVATED)], columns).to_pylist()
        return sorted(rows, key=_activation_order)

    def _row(self, model: JobModel, event: str, reason: str, text: str | None) -> dict[str, Any]:
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
            "created_at": self.table.now(),
        }


def check_reason(model: JobModel, reason: object) -> None:
    """A saved version says why it was planned; checked before anything is locked or written."""
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError(
            f"saving version {model.version} of job {model.job_name!r} needs a reason (why it was planned)"
        )


def _activation_order(row: Mapping[str, Any]) -> tuple[int, datetime]:
    # Rows written around this API (no number) sort by time before numbered ones.
    return (row["activation"] or 0, row["created_at"])


def _join(items: Iterable[object]) -> str:
    return ", ".join(str(i) for i in items)
