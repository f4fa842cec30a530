"""Compaction of a job's control-table files: one file per table and job instead of one per commit.

Why. Every control fact is a blind append (``control.table``), so a running job adds a file to the
checkpoints and metrics tables with every batch and one to the drivers table with every heartbeat.
A table's snapshot lists every file, and every open, refresh, read and append pays for that list:
on the checkpoints table, a fresh process's first read of a job's checkpoints took 1.15 s after 2,000 batches
against 0.15 s after 200, an append 306 ms against 57 (``benchmarks/bench_control.py``). Compaction
rewrites one job's files of one table into a few, with the same rows; it changes no answer, since every
reader orders rows by their numbers (batch, sequence, version), never by file (docs/storage.md, "Control
tables over time"). Before the checkpoints table is rewritten, its rows no reader asks for again are deleted
(``checkpoints.prune_superseded``): files alone do not keep a read of a version's latest checkpoints from
growing with the version's age, its rows do.

Safe beside the job's own writers: a compaction commit only removes files as a rewrite
(``dataChange=false``), which Delta's conflict rules let through concurrent appends, and a reader that
still holds an older snapshot finds its files, because the rewritten files are deleted (vacuum) only
``RETAIN_HOURS`` after they left the table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import DeltaError

from pipelines.control import ControlPlane
from pipelines.control.checkpoints import CHECKPOINTS, prune_superseded
from pipelines.control.decisions import AUTOSIZE_DECISIONS
from pipelines.control.dq_results import DQ_RESULTS
from pipelines.control.drivers import DRIVERS
from pipelines.control.job_models import CONFIG_KEY, JOB_MODELS
from pipelines.control.locks import SCALING_LOCKS
from pipelines.control.metrics import DEFAULT_RETENTION_HOURS, MAX_RETENTION_HOURS, METRICS
from pipelines.control.metrics import expire as expire_metrics
from pipelines.control.scaling_events import SCALING_EVENTS
from pipelines.control.table import COMMIT_RETRIES
from pipelines.deltaio import CACHED_FILE_BYTES, open_if_table, readable
from pipelines.errors import PipelinesError, StoreUnavailableError, store_unanswered
from pipelines.storage.home import Home

TABLES: tuple[str, ...] = tuple(
    spec.name
    for spec in (
        CHECKPOINTS,
        METRICS,
        DRIVERS,
        JOB_MODELS,
        SCALING_EVENTS,
        SCALING_LOCKS,
        DQ_RESULTS,
        AUTOSIZE_DECISIONS,
    )
)
"""The control tables with a spec: each is partitioned by job, so one job's files are compacted without touching
another's. ``adjunct_checkpoints`` (the stores' rows of each batch) is compacted too; its module is imported only
then, being heavy for a driver's start."""

MIN_FILES = 50
"""A job's partition of a table with fewer files is left as it is: rewriting it would gain nothing measurable."""
TARGET_BYTES = CACHED_FILE_BYTES
"""Files up to the size each process keeps parsed (``deltaio``): a driver rereads them from memory, and a read of the
last minutes still skips the older files by their statistics."""
RETAIN_HOURS = 168
"""How long a rewritten file stays on the store (Delta's default, a week): a process that opened the table before
the compaction (a driver between refreshes, a host that was down) still reads its snapshot's files."""


@dataclass(frozen=True)
class Compacted:
    """What compaction did to one job's partition of one control table."""

    table: str
    files_before: int
    files_after: int
    deleted: int  # files of earlier compactions, older than RETAIN_HOURS, removed from the store
    rows_deleted: int = 0  # rows no reader asks for again: superseded checkpoints, metrics past their retention

    @property
    def changed(self) -> bool:
        """Whether the round did anything to this table worth a line in a log."""
        return self.files_after < self.files_before or self.rows_deleted > 0


def compact_job(home: Home, job: str, *, min_files: int = MIN_FILES) -> list[Compacted]:
    """Compact ``job``'s files in every control table that has at least ``min_files`` of them.

    Rows no reader asks for again are deleted first: superseded checkpoints and store checkpoints, and metric rows
    older than the job's ``metrics_retention_hours`` (whatever the table's file count).
    """
    from pipelines.control.store_checkpoints import TABLE as ADJUNCT_CHECKPOINTS
    from pipelines.control.store_checkpoints import prune_store_checkpoints

    control = ControlPlane(home)
    expired_before = control.clock.now() - timedelta(hours=_metrics_retention_hours(control, job))
    done = []
    for name in (*TABLES, ADJUNCT_CHECKPOINTS):
        path = home.control_table(name)
        dt = open_if_table(path)
        if dt is None:
            continue
        with readable(path):
            before = _files(dt, job)
        if before == 0:
            continue
        try:
            rows_deleted = expire_metrics(dt, job, expired_before) if name == METRICS.name else 0
            if before < min_files:
                if rows_deleted:
                    dt.update_incremental()
                done.append(Compacted(name, before, _files(dt, job) if rows_deleted else before, 0, rows_deleted))
                continue
            if name == CHECKPOINTS.name:
                rows_deleted = prune_superseded(dt, job)
            elif name == ADJUNCT_CHECKPOINTS:
                rows_deleted = prune_store_checkpoints(dt, job)
            dt.optimize.compact(
                partition_filters=[("job", "=", job)],
                target_size=TARGET_BYTES,
                commit_properties=CommitProperties(max_commit_retries=COMMIT_RETRIES),
            )
            deleted = dt.vacuum(retention_hours=RETAIN_HOURS, dry_run=False, enforce_retention_duration=False)
        except (DeltaError, OSError) as error:  # a commit that did not land changed nothing: no damage
            if store_unanswered(str(error)):
                raise StoreUnavailableError(f"the store of {path} did not answer the compaction: {error}") from None
            raise PipelinesError(
                f"the compaction of {path} for job {job!r} failed, its answers are unchanged ({error}); "
                f"run 'pipelines job compact {job}' again, or leave it to the job's driver (every 10 minutes)"
            ) from None
        with readable(path):
            dt.update_incremental()
            done.append(Compacted(name, before, _files(dt, job), len(deleted), rows_deleted))
    return done


def _metrics_retention_hours(control: ControlPlane, job: str) -> int:
    """The job's ``metrics_retention_hours``, from its active model's configuration (the default without one),
    at most a century: a job created before that bound could hold a number too large for the clock arithmetic."""
    try:
        saved = json.loads(control.job_models.active(job).config[CONFIG_KEY])
        hours = int(saved.get("metrics_retention_hours") or DEFAULT_RETENTION_HOURS)
    except (PipelinesError, KeyError, TypeError, ValueError):  # no model (a job being created, a damaged one)
        return DEFAULT_RETENTION_HOURS
    return min(hours, MAX_RETENTION_HOURS)


def _files(dt: DeltaTable, job: str) -> int:
    return len(dt.file_uris(file_pruning_predicate=[("job", "=", job)]))


def summary(done: Iterable[Compacted]) -> str:
    """One line for a driver's log or a CLI: the tables whose files were rewritten or whose rows were deleted."""
    changed = [
        f"{c.table} {c.files_before} -> {c.files_after} files"
        + (f" ({c.rows_deleted:,} rows deleted)" if c.rows_deleted else "")
        for c in done
        if c.changed
    ]
    return ", ".join(changed) if changed else "nothing to compact"
