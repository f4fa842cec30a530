"""The scaling lock: one scaling operation per job at a time, across processes and machines.

Airflow's ``max_active_runs`` keeps two runs of *one* DAG apart, but a rescale
and a repartition absorption of the same job come from different DAGs, and a
user can run ``pipelines rescale`` beside both. So the lock lives in the
control plane, where every one of them looks.

How it holds without a lock server. The ``scaling_locks`` table is
append-only; each row is a numbered state change of one job's lock
(``seq`` 1, 2, ...), and the latest row is the lock's state. Every change is
committed with the Delta application transaction ``lock:<job>``, which
delta-rs refuses to let two concurrent commits both carry: of two operations
that read the same free lock and race to take it, exactly one commit lands
and the other gets :class:`ScalingInProgressError`.

Why a lease. A holder that crashes (a killed Airflow worker) must not block
the job forever, so a hold expires ``ttl_s`` after it was last renewed, and
every step of an operation renews it. The lease is measured on one clock, the
store's (``storage.clock``): the holder stamps ``at`` and ``expires_at`` with
the store's time, and a reader compares ``expires_at`` with the store's now.
The holder and the reader usually run on different hosts (Airflow workers),
whose wall clocks may be minutes apart: compared with each other, a live hold
could look expired (and be taken over) or a dead one hold for as long as the
holder's clock was ahead. Which row is in force is decided by ``seq`` alone. The holder's ``owner`` string is stable
across retries of the same operation (an Airflow run id), so a retried or
cleared task re-enters its own lock instead of waiting for itself; anyone
else may take over an expired lease, and the row says whose it was. A holder
that lives in one process (the CLI's ``rescale``) is named by host and pid,
and when that process is gone from this host its lock is taken over at once
instead of after the lease; ``pipelines lock release JOB`` is the operator's
way out for a holder dead on another machine.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
from deltalake import Transaction
from deltalake.exceptions import CommitFailedError

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, column
from pipelines.core.ssp import validate_name
from pipelines.errors import PipelinesError
from pipelines.storage.clock import StoreClock
from pipelines.storage.home import Home

DEFAULT_TTL_S = 900.0
HELD = ("acquired", "renewed", "taken over")

SCALING_LOCKS = TableSpec(
    "scaling_locks",
    pa.schema(
        [
            column("job", pa.string()),
            column("seq", pa.int64()),  # 1, 2, ... per job; the highest is the lock's state
            column("status", pa.string()),  # acquired | renewed | taken over | released
            column("owner", pa.string()),  # who holds it, stable across retries (e.g. dag_id/run_id)
            column("operation", pa.string()),  # what for, for a human reading a refusal
            column("expires_at", TIMESTAMP),
            column("previous_owner", pa.string(), nullable=True),  # on a take-over: the expired holder
            column("at", TIMESTAMP),
        ]
    ),
    "One row per change of a job's scaling lock; the highest seq is in force",
    append_only=True,
)


PROCESS_OWNER_KINDS = ("cli", "plan")


def process_owner(kind: str) -> str:
    """The owner name of an operation that lives and dies with this process: ``kind:host:pid:nonce``.

    Such a holder can be known dead (same host, pid gone) and taken over at
    once; an Airflow run's owner spans several task processes and cannot.
    """
    if kind not in PROCESS_OWNER_KINDS:
        raise ValueError(f"process owner kind must be one of {PROCESS_OWNER_KINDS}")
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _process_owner_parts(owner: str) -> tuple[str, str, int] | None:
    """``(kind, host, pid)`` of a ``process_owner`` name; None for other owners (an Airflow run)."""
    kind, _, rest = owner.partition(":")
    host, _, rest = rest.partition(":")
    pid, _, _ = rest.partition(":")
    if kind not in PROCESS_OWNER_KINDS or not host or not pid.isdigit():
        return None
    return kind, host, int(pid)


def describe_owner(owner: str) -> str:
    """The holder as a person looking for it needs it: a process owner with its pid and host spelled out."""
    parts = _process_owner_parts(owner)
    if parts is None:
        return owner
    _, host, pid = parts
    return f"{owner} (pid {pid} on host {host})"


def dead_process_owner(owner: str) -> bool:
    """True for a ``process_owner`` of this host whose process no longer exists."""
    parts = _process_owner_parts(owner)
    if parts is None or parts[1] != socket.gethostname():
        return False
    pid = str(parts[2])
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


class ScalingInProgressError(PipelinesError):
    """Another scaling operation holds the job's lock; the job stays as it is."""


@dataclass(frozen=True)
class LockState:
    """The lock's row in force, and how much of its lease was left when it was read (by the store's clock)."""

    job: str
    seq: int
    status: str
    owner: str
    operation: str
    expires_at: datetime  # the store's time (written by the holder from its reading of the store's clock)
    at: datetime
    remaining_s: float = field(default=0.0, compare=False)  # expires_at minus the store's now when read; <= 0: expired

    @property
    def held(self) -> bool:
        return self.status in HELD and self.remaining_s > 0

    def describe(self) -> str:
        return (
            f"{describe_owner(self.owner)} holds it for {self.operation!r} since {self.at:%Y-%m-%d %H:%M:%S} UTC "
            f"(lease expires in {max(self.remaining_s, 0):.0f}s)"
        )


class ScalingLock:
    """The lock of every job in one home; cheap to create, keeps no state but a table handle."""

    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self._table = ControlTable(SCALING_LOCKS, home, clock)

    def state(self, job: str) -> LockState | None:
        rows = self._table.read(validate_name("job", job)).to_pylist()
        if not rows:
            return None
        row = max(rows, key=lambda r: r["seq"])
        # Only a hold needs the store's now (a probe of the store, then carried on this host's boot clock).
        left = (row["expires_at"] - self._table.now()).total_seconds() if row["status"] in HELD else 0.0
        return LockState(
            job, row["seq"], row["status"], row["owner"], row["operation"], row["expires_at"], row["at"], left
        )

    def acquire(self, job: str, owner: str, operation: str, *, ttl_s: float = DEFAULT_TTL_S) -> LockState:
        """Take the lock, renew it if ``owner`` holds it, or take over an expired lease; else refuse."""
        if not owner.strip():
            raise PipelinesError("a scaling lock needs a non-empty owner (who is scaling)")
        # The commit must build on the snapshot the decision was made on: `state` refreshes this same handle,
        # and `_append` commits on it without refreshing, so a change in between is a conflict, not a lost race.
        with self._table.lock:
            dt = self._table.ensure()
            current = self.state(job)
            previous = None
            if current is None or current.status == "released":
                status = "acquired"
            elif current.owner == owner:
                status = "renewed"
            elif current.held and dead_process_owner(current.owner):
                status, previous = "taken over", current.owner  # its process is gone: the lease would only make us wait
            elif current.held:
                raise ScalingInProgressError(
                    f"job {job!r} is already being scaled: {current.describe()}; "
                    "wait for it to finish (or for its lease to expire) and try again"
                )
            else:
                status, previous = "taken over", current.owner
            seq = (current.seq if current else 0) + 1
            return self._append(dt, job, seq, status, owner, operation, ttl_s, previous)

    def wait_acquire(
        self,
        job: str,
        owner: str,
        operation: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        wait_s: float = 0.0,
        poll_s: float = 2.0,
        progress: Any = None,
    ) -> LockState:
        """``acquire``, waiting up to ``wait_s`` for another holder to finish; refuses after that."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self.acquire(job, owner, operation, ttl_s=ttl_s)
            except ScalingInProgressError as e:
                if time.monotonic() >= deadline:
                    raise
                if progress is not None:
                    progress(f"waiting for the scaling lock of {job!r}: {e}")
                time.sleep(poll_s)

    def release(self, job: str, owner: str) -> bool:
        """Let go if ``owner`` holds the lock (even past its lease); False if it was not theirs to release."""
        with self._table.lock:
            dt = self._table.ensure()
            current = self.state(job)
            if current is None or current.status == "released" or current.owner != owner:
                return False
            self._append(dt, job, current.seq + 1, "released", owner, current.operation, 0.0, None)
            return True

    def force_release(self, job: str, by: str) -> LockState | None:
        """An operator's release of a lock whose holder will not release it; the row names who did it and whose it was.

        For a holder on another machine that is known to be dead: a dead holder
        on this machine is taken over by the next operation anyway.
        """
        with self._table.lock:
            dt = self._table.ensure()
            current = self.state(job)
            if current is None or current.status == "released":
                return None
            self._append(dt, job, current.seq + 1, "released", by, current.operation, 0.0, current.owner)
            return current

    def _append(
        self, dt: Any, job: str, seq: int, status: str, owner: str, operation: str, ttl_s: float, previous: str | None
    ) -> LockState:
        now = self._table.now()
        expires_at = now + timedelta(seconds=ttl_s)
        row = {
            "job": job,
            "seq": seq,
            "status": status,
            "owner": owner,
            "operation": operation,
            "expires_at": expires_at,
            "previous_owner": previous,
            "at": now,
        }
        try:
            self._table.append([row], dt=dt, txn=Transaction(f"lock:{job}", seq))
        except CommitFailedError:
            now_state = self.state(job)
            raise ScalingInProgressError(
                f"another operation changed the scaling lock of job {job!r} at the same moment; "
                f"now: {now_state.describe() if now_state else 'free'}"
            ) from None
        return LockState(job, seq, status, owner, operation, expires_at, now, ttl_s if status in HELD else 0.0)
