"""The ``drivers`` table: which job drivers run, where, since when, and whether they still beat.

A driver registers when it starts (a new ``driver_id``), writes a row with
every heartbeat (every 10 s, from the driver's heartbeat thread) carrying
the model version and the last batch it committed, and a final ``stopped``
row when it stops cleanly (``failed`` when its query failed). A driver that
was killed writes nothing more: its last beat ages, and a reader sees it as
silent. Append-only and partitioned by job, like the other control tables:
every row is a new fact, written by the one process it describes.

Rows are host-aware: a driver is named by its host, its pid on that host and
its Spark application id, because drivers run on other machines than the
ones that look (a cluster's driver host, an Airflow worker). Nothing here
signals a pid: a pid means something only on its host, and stopping goes
through the stop request the driver polls.

This table is what says whether a job's driver is live (the scaling steps,
the keepalive, ``pipelines stop``, the page): a driver that has not ended and
whose last row is younger than ``STALE_AFTER_S``. The age is measured on the
store's clock: every row's ``at`` is the store's time when the driver wrote it
(``storage.clock``), and a reader compares it with the store's now, so a
driver on a host whose clock is minutes off is neither dead while it beats
nor alive after it stopped. Within one driver its rows are ordered by ``at``,
which one process stamps from one clock, strictly increasing; once it wrote
its end, it writes nothing more.

Every row repeats the driver's identity (host, pid, application, master,
start), so the recent rows alone say everything about a running driver:
readers open only the files of the last ``RECENT_S`` (pruned by their ``at``
statistics), however long the driver has run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, column
from pipelines.core.ssp import validate_name
from pipelines.storage.clock import StoreClock
from pipelines.storage.home import Home

STARTED, RUNNING, STOPPED, FAILED = "started", "running", "stopped", "failed"
ENDED = (STOPPED, FAILED)
STALE_AFTER_S = 35.0
"""A driver whose last row is older than this is silent: it beats every 10 s (the scaling steps' live limit)."""
RECENT_S = 3600.0
"""Readers look at this much of the table first; a job with no row in it is looked up by its newest file."""
RECENT_LIVE_S = 3 * STALE_AFTER_S
"""How much of the table a liveness question reads: a live driver has a row in the last ``STALE_AFTER_S``."""

DRIVERS = TableSpec(
    "drivers",
    pa.schema(
        [
            column("job", pa.string()),
            column("driver_id", pa.string()),  # a uuid per driver start
            column("host", pa.string()),
            column("pid", pa.int64()),  # on that host
            column("app_id", pa.string(), nullable=True),  # Spark's application id
            column("master", pa.string(), nullable=True),
            column("started_at", TIMESTAMP),
            column("state", pa.string()),  # started | running | stopped | failed
            column("model_version", pa.int64(), nullable=True),  # the model its query runs
            column("batch_id", pa.int64(), nullable=True),  # the last batch it committed (-1: none yet)
            column("detail", pa.string(), nullable=True),  # a failure's message
            column("at", TIMESTAMP),
        ]
    ),
    "Job drivers: a row at start, one per heartbeat, one at the end; host, pid and Spark application per driver",
    append_only=True,
)


@dataclass(frozen=True)
class DriverRow:
    """A driver's latest row: who it is, where, and what it last said."""

    job: str
    driver_id: str
    host: str
    pid: int
    app_id: str | None
    master: str | None
    started_at: datetime
    state: str
    model_version: int | None
    batch_id: int | None
    detail: str | None
    at: datetime

    def age_s(self, now: datetime) -> float:
        """Seconds since its last row, ``now`` being the store's time (``Drivers.now``): one clock."""
        return max(0.0, (now - self.at).total_seconds())

    def live(self, now: datetime) -> bool:
        """Not ended and beating: its last row is fresh by the store's clock."""
        return self.state not in ENDED and self.age_s(now) <= STALE_AFTER_S

    @property
    def on_this_host(self) -> bool:
        """Whether its pid means anything here: only the host that started a process may look its pid up."""
        return self.host == socket.gethostname()


class Registration:
    """One driver's rows: ``start`` once, ``beat`` with every heartbeat, ``end`` when it stops.

    A failed write is swallowed: a missed row must never take a job down (a
    missed beat costs at worst a driver taken for dead after ``STALE_AFTER_S``,
    then a catch-up run or a relaunch, which the checkpoints make safe). After
    ``end`` nothing more is written: the heartbeat thread may come round once
    more on the driver's way out, and its beat must not make it look live.
    """

    def __init__(
        self,
        home: Home,
        job: str,
        *,
        app_id: str | None = None,
        master: str | None = None,
        clock: StoreClock | None = None,
    ) -> None:
        validate_name("job", job)
        self.table = ControlTable(DRIVERS, home, clock)
        self.identity = {
            "job": job,
            "driver_id": uuid.uuid4().hex,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "app_id": app_id,
            "master": master,
            "started_at": self.table.now(),
        }
        self.model_version: int | None = None
        self.batch_id: int | None = None
        self.ended = False
        self._lock = threading.Lock()  # the heartbeat thread and the driver's loop both write

    @property
    def driver_id(self) -> str:
        return str(self.identity["driver_id"])

    def start(self) -> None:
        self._write(STARTED)

    def beat(self, model_version: int | None = None, batch_id: int | None = None) -> None:
        if model_version is not None:
            self.model_version = model_version
        if batch_id is not None:
            self.batch_id = batch_id
        self._write(RUNNING)

    def end(self, failure: str | None = None, *, model_version: int | None = None, batch_id: int | None = None) -> None:
        """The last row: ``stopped``, or ``failed`` with the failure; with where the driver's query got to."""
        if model_version is not None:
            self.model_version = model_version
        if batch_id is not None:
            self.batch_id = batch_id
        self._write(FAILED if failure else STOPPED, failure)

    def _write(self, state: str, detail: str | None = None) -> None:
        with self._lock:  # stamped and marked under one lock: no beat is stamped after the end
            if self.ended:
                return
            self.ended = state in ENDED
            try:
                at = self.table.now()
            except Exception:  # the store did not answer the clock's probe: this row is missed, like a failed append
                return
            row = {
                **self.identity,
                "state": state,
                "model_version": self.model_version,
                "batch_id": self.batch_id,
                "detail": detail[:2000] if detail else None,
                "at": at,
            }
        with contextlib.suppress(Exception):  # a missed row must never take the job down
            self.table.append([row])


class Drivers:
    """Reads of the table: each driver's latest row, newest driver first."""

    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self.table = ControlTable(DRIVERS, home, clock)

    def now(self) -> datetime:
        """The store's time: what a driver's age is measured against."""
        return self.table.now()

    def latest(self, job: str, *, now: datetime | None = None, recent_s: float = RECENT_S) -> list[DriverRow]:
        """Every driver seen in the last ``recent_s`` (or, with none, the newest one ever), newest first.

        ``now`` is the store's time (default: read now). A liveness question
        needs only the last ``STALE_AFTER_S`` or so: a short ``recent_s`` opens
        a few files instead of an hour's beats.
        """
        now = now or self.now()
        rows = self._rows(job, now - timedelta(seconds=recent_s))
        if not rows:
            newest = self._newest_file_start(job)
            rows = self._rows(job, newest) if newest is not None else []
        last: dict[str, dict[str, Any]] = {}
        for row in sorted(rows, key=lambda r: r["at"]):
            last[row["driver_id"]] = row
        drivers = [DriverRow(**r) for r in last.values()]
        return sorted(drivers, key=lambda d: d.started_at, reverse=True)

    def live(self, job: str, *, now: datetime | None = None) -> list[DriverRow]:
        """The job's live drivers, on any host, newest first (``now``: the store's time, default read now)."""
        now = now or self.now()
        return [d for d in self.latest(job, now=now, recent_s=RECENT_LIVE_S) if d.live(now)]

    def _rows(self, job: str, since: datetime) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.table.read(job, [("at", ">=", since)]).to_pylist()
        return rows

    def _newest_file_start(self, job: str) -> datetime | None:
        """The earliest ``at`` of the job's newest file, from the log's statistics (no file is opened)."""
        files = [(end, start) for start, end in self.table.file_spans(job)]
        return max(files)[1] if files else None
