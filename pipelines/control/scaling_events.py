"""The ``scaling_events`` table: rescales and partition changes, one row per status change.

The latest row per ``event_id`` is the event's state. Latest by ``seq``, the
job's event rows numbered in commit order under the app transaction
``events:<job>``: an event's steps are recorded by Airflow tasks on different
workers, whose clocks cannot say which row came last (a step recorded by a
host whose clock is behind would otherwise be overtaken by the step before
it). Events are listed in the order their first rows were committed.
``started_at`` and ``finished_at`` are the store's time (``storage.clock``) when
the operations stamp them, so an event's duration is measured on one clock.
An event is the window
the data-quality checks verify (``pipelines verify JOB --event ID``) and the
record operators read (downtime, records replayed, the verdict). Statuses are
``EventStatus`` values, shared by the operations that write them, the CLI and
the Airflow page that show them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import pyarrow as pa

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, column, utc_now
from pipelines.core.ssp import validate_name
from pipelines.storage.clock import StoreClock
from pipelines.storage.home import Home


class EventStatus(StrEnum):
    """Where a scaling event stands; the steps of ``pipelines.operations.scaling`` in order, then its ends."""

    STARTED = "started"
    STOPPED = "stopped"  # how the job switches is decided (in place, or a catch-up run)
    MIGRATED = "migrated"  # model N+1 and its start checkpoints are saved, not active
    ACTIVATED = "activated"
    CAUGHT_UP = "caught up"
    VERIFIED = "verified"  # an end: the data-quality checks passed
    DQ_FAILED = "dq failed"  # an end: N+1 is in force, the checks found a problem
    FAILED = "failed"  # an end: N+1 is in force, a later step failed
    ROLLED_BACK = "rolled back"  # an end: N+1 was never activated, N stays in force
    RECOVERED = "recovered"  # an end: a crashed operation's N+1 had been activated, settled later

    @property
    def bad(self) -> bool:
        return self in (EventStatus.FAILED, EventStatus.DQ_FAILED)

    @property
    def undone(self) -> bool:
        return self is EventStatus.ROLLED_BACK


SCALING_EVENTS = TableSpec(
    "scaling_events",
    pa.schema(
        [
            column("job", pa.string()),
            column("event_id", pa.string()),
            column("kind", pa.string()),
            column("status", pa.string()),
            column("from_version", pa.int64(), nullable=True),
            column("to_version", pa.int64(), nullable=True),
            column("from_factor", pa.int32(), nullable=True),
            column("to_factor", pa.int32(), nullable=True),
            column("started_at", TIMESTAMP),
            column("finished_at", TIMESTAMP, nullable=True),
            column("details", pa.string(), nullable=True),  # JSON object
            column("recorded_at", TIMESTAMP),
            column("seq", pa.int64(), nullable=True),  # 1, 2, ... per job in commit order (NULL: older rows)
        ]
    ),
    "Rescales and partition changes; one row per status change, the latest row per event_id is its state",
)


@dataclass(frozen=True)
class ScalingEvent:
    """One rescale or partition change; recorded at start and again at every status change."""

    job: str
    event_id: str
    kind: str
    status: EventStatus
    started_at: datetime
    from_version: int | None = None
    to_version: int | None = None
    from_factor: int | None = None
    to_factor: int | None = None
    finished_at: datetime | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, job: str, kind: str, *, at: datetime | None = None, **fields: Any) -> ScalingEvent:
        """A new event; ``at``: its start by the store's clock (``ControlPlane.clock``), else this host's."""
        return cls(
            job=job,
            event_id=uuid.uuid4().hex,
            kind=kind,
            status=EventStatus.STARTED,
            started_at=at or utc_now(),
            **fields,
        )

    def moved(self, status: EventStatus, to_version: int | None = None, **details: Any) -> ScalingEvent:
        """The same event at its next step; ``details`` are merged into the recorded ones."""
        return replace(
            self,
            status=status,
            to_version=to_version if to_version is not None else self.to_version,
            details={**self.details, **details},
        )

    def finish(self, status: EventStatus, *, at: datetime | None = None, **details: Any) -> ScalingEvent:
        """The same event, ended (``at``, as for ``start``); ``details`` are merged into the recorded ones."""
        return replace(
            self, status=EventStatus(status), finished_at=at or utc_now(), details={**self.details, **details}
        )


class ScalingEvents:
    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self.table = ControlTable(SCALING_EVENTS, home, clock)

    def record(self, event: ScalingEvent) -> None:
        """Append the event's state as the job's next event row (``seq``): it is the event's state from now on."""
        validate_name("job", event.job)
        row = {
            "job": event.job,
            "event_id": event.event_id,
            "kind": event.kind,
            "status": str(event.status),
            "from_version": event.from_version,
            "to_version": event.to_version,
            "from_factor": event.from_factor,
            "to_factor": event.to_factor,
            "started_at": event.started_at,
            "finished_at": event.finished_at,
            "details": json.dumps(dict(event.details), default=str, sort_keys=True),
            "recorded_at": self.table.now(),
        }
        self.table.append_next(f"events:{event.job}", lambda: self._last_seq(event.job), lambda n: [{**row, "seq": n}])

    def _last_seq(self, job: str) -> int:
        return max((s for s in self.table.read(job, columns=["seq"]).column("seq").to_pylist() if s), default=0)

    def history(self, job: str) -> list[ScalingEvent]:
        """Each event's latest state, oldest event first (by the order their rows were committed)."""
        # Rows from before the sequence (NULL) come first, in the order they were recorded (one host's clock then).
        rows = sorted(self.table.read(job).to_pylist(), key=lambda r: (r["seq"] or 0, r["recorded_at"]))
        latest: dict[str, dict[str, Any]] = {}
        first: dict[str, int] = {}
        for i, r in enumerate(rows):
            latest[r["event_id"]] = r
            first.setdefault(r["event_id"], i)
        events = []
        for r in sorted(latest.values(), key=lambda r: first[r["event_id"]]):
            r.pop("recorded_at")
            r.pop("seq")
            r["details"] = json.loads(r["details"]) if r["details"] else {}
            r["status"] = EventStatus(r["status"])
            events.append(ScalingEvent(**r))
        return events

    def find(self, job: str, event_id: str) -> ScalingEvent | None:
        """An event by id, or by an unambiguous prefix of it."""
        found = [e for e in self.history(job) if e.event_id == event_id or e.event_id.startswith(event_id)]
        return found[0] if len(found) == 1 else None
