"""The ``metrics`` table: one value per row (long and narrow), so a new metric needs no schema change.

Per job, model version, micro-batch and (for per-task or per-partition
values) the virtual task's name or the partition's SSP in its wire form.
Query lifecycle events (``query_started``, ``first_progress``,
``query_stopped``, ``heartbeat``) are rows too, their value the driver's
wall-clock time, so downtime is measured the same way for every kind of
switch (an in-place switch: both ends stamped by one driver, one clock).
A row's ``at`` is the store's time (``ControlTable.now``): the autosizer's
window and a batch's wall time are measured on one clock, whichever host
committed the batch.

Every reader reads a window (the page its last hour, the autosizer its last
minutes, a rescale's record the time since it began), so rows older than the
job's ``metrics_retention_hours`` are deleted with the control tables'
compaction (``expire``): the table's size stays that of the retention, not of
the job's life.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, column, delete_rows, sql_text
from pipelines.core.ssp import validate_name
from pipelines.errors import ConfigError
from pipelines.storage.clock import StoreClock
from pipelines.storage.home import Home

if TYPE_CHECKING:
    import pandas as pd

METRICS = TableSpec(
    "metrics",
    pa.schema(
        [
            column("job", pa.string()),
            column("model_version", pa.int64()),
            column("batch_id", pa.int64()),
            column("task", pa.string(), nullable=True),  # virtual task or SSP (wire form); NULL for job-wide
            column("metric", pa.string()),
            column("value", pa.float64()),
            column("at", TIMESTAMP),
        ]
    ),
    "One metric value per row (long and narrow), per job, model version, batch and virtual task",
)


DEFAULT_RETENTION_HOURS = 168
"""How long a job's rows stay in the table by default (``metrics_retention_hours``): a week, as Kafka keeps a log."""
MAX_RETENTION_HOURS = 876_000
"""A century of metric rows: a larger value overflowed the clock arithmetic of the compaction a running driver
does every 10 minutes."""


def metric(job: str, version: int, batch_id: int, task: str | None, name: str, value: float) -> dict[str, Any]:
    """One row of the metrics table."""
    return {"job": job, "model_version": version, "batch_id": batch_id, "task": task, "metric": name, "value": value}


class Metrics:
    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self.table = ControlTable(METRICS, home, clock)

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """One commit for a batch of metric values: job, model_version, batch_id, task?, metric, value, at?."""
        now = self.table.now()  # the store's time: windows and intervals are measured on one clock
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
            self.table.append(prepared)

    def read(
        self,
        job: str,
        *,
        model_version: int | None = None,
        metrics: Iterable[str] | None = None,
        since_batch: int | None = None,
        since: datetime | None = None,
    ) -> pd.DataFrame:
        """A job's metric rows, oldest first, narrowed by version, metric names, first batch and first time.

        ``since`` prunes files by their ``at`` statistics: a view of the last
        minutes opens only the files written in them.
        """
        where: list[tuple[str, str, Any]] = []
        if model_version is not None:
            where.append(("model_version", "=", model_version))
        if metrics is not None:
            where.append(("metric", "in", sorted(set(metrics))))
        if since_batch is not None:
            where.append(("batch_id", ">=", since_batch))
        if since is not None:
            where.append(("at", ">=", since))
        table = self.table.read(job, where)
        return table.sort_by([("at", "ascending"), ("batch_id", "ascending")]).to_pandas()

    def recent_start(self, job: str, since: datetime, max_files: int) -> datetime:
        """``since``, or later if more than ``max_files`` of the job's files hold rows from ``since`` on.

        Every committed batch adds a file, so a busy job's hour is thousands
        of files; a view that reads "the last hour" reads from here instead:
        the newest ``max_files`` files' rows (files are chosen by their
        ``at`` statistics, from the log, without opening them).
        """
        ends = sorted((end for _, end in self.table.file_spans(job) if end >= since), reverse=True)
        return since if len(ends) <= max_files else max(since, ends[max_files - 1])


def expire(dt: DeltaTable, job: str, before: datetime) -> int:
    """Delete ``job``'s metric rows written before ``before`` (the store's time); the number of rows deleted.

    No commit when no file of the job holds such a row (by the files' ``at`` statistics, from the log).
    """
    validate_name("job", job)
    actions = pa.table(dt.get_add_actions(flatten=True))
    if "min.at" not in actions.column_names:
        return 0
    owners, starts = actions.column("partition.job").to_pylist(), actions.column("min.at").to_pylist()
    if not any(owner == job and (start is None or start < before) for owner, start in zip(owners, starts, strict=True)):
        return 0
    return delete_rows(dt, f"job = {sql_text(job)} AND at < {sql_text(before.isoformat())}")
