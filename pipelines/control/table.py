"""The one table primitive of the control plane: a lazily created, append-only-friendly Delta table.

Every control table (job models, checkpoints, scaling events, metrics,
data-quality results, locks, autosize decisions) is a ``ControlTable`` over a
``TableSpec``, written with the ``deltalake`` package (no Spark) under
``<home>/control/<table>/`` and created with its explicit schema by its first
write. The modules beside this one each own one table: its spec, its rows,
and the questions asked of it.

Why the tables are append-only. delta-rs retries no conflicting MERGE or
UPDATE, and a control plane is written by several processes at once (the
driver after every batch, Airflow tasks between them). Blind appends never
conflict, so each fact is a new row and readers pick the latest row. Where
two writers must not both win, the commit carries a Delta application
transaction (``ControlTable.append(txn=...)``): delta-rs rejects a commit
whose app id a concurrent commit also set, so two racing writers end in one
success and one ``CommitFailedError``, never in two rows that both count.

Every table is partitioned by ``job``: every read is about one job, so log
replay prunes the other jobs' files without opening them, ``jobs()`` comes
from the partition listing alone, and per-job retention or compaction touches
one folder. Within a job, files carry min/max statistics, so filters on
``model_version`` or ``batch_id`` prune files too.

Timestamps are UTC microseconds by the store's clock (``ControlTable.now``,
``storage.clock``), so a duration between two of them, or between one and the
store's now, is measured on one clock whichever hosts wrote them. They never
order rows across processes: a table whose readers pick "the latest" row does
so by a sequence number, a version or an activation number, written under an
application transaction where two writers could race (``next_seq``).
``utc_now`` is this host's wall clock, for what is only shown.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.schema import Schema as DeltaSchema

from pipelines.backoff import Backoff
from pipelines.deltaio import append, create_table, is_table, open_if_table, read_delta, refresh
from pipelines.errors import ConfigError, ModelError, StoreUnavailableError
from pipelines.storage.clock import StoreClock, store_clock
from pipelines.storage.home import Home
from pipelines.storage.location import Location

TIMESTAMP = pa.timestamp("us", tz="UTC")

Where = Sequence[tuple[str, str, Any]]

COMMIT_RETRIES = 100
"""How often an append is rebased onto commits that beat it: a blind append never conflicts, it only lost a race.
delta-rs's default, 15, lost 4 of 24 appends of 24 processes committing at once to one table on S3."""

RETRY_BACKOFF = Backoff(base_s=0.005, cap_s=0.2)
"""The wait between commits retried after losing to another writer (contention: full jitter, ``pipelines.backoff``)."""


def lost_commit_race(error: BaseException) -> bool:
    """delta-rs's word that a commit lost to another writer: it wrote nothing, so it may be made again."""
    return isinstance(error, CommitFailedError)


BLIND_APPEND_ATTEMPTS = 5
"""How often a blind append is written again after its commit failed a conflict check. delta-rs counts every append
as a read of the whole table, so a delete beside it (``delete_rows``: compaction's pruning and retention) fails it;
the rows depend on nothing the append read, so writing them again on the newer snapshot is the same fact, once."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    description: str
    append_only: bool = False
    partition_by: tuple[str, ...] = ("job",)


def column(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    """A column of a control table: required unless it says otherwise."""
    return pa.field(name, type_, nullable=nullable)


class _Clock:
    """This host's UTC now, strictly increasing within the process: for times that are only shown."""

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


class ControlTable:
    """One lazily created Delta table; keeps its DeltaTable and refreshes it incrementally.

    Cheap to create and holding no lock on the store: any number of processes
    may open the same table. Threads of one process that share it (a driver's
    heartbeat and its loop share the metrics table) take turns through
    ``lock``: a DeltaTable must not be used by two threads at once. While one
    waits in delta-rs for the store (Python's GIL released, the table's own
    lock held), another thread's quick call on the same table (``table_uri``,
    ``version``) waits for that lock *holding the GIL*, and every thread of
    the process stands still for delta-rs's retry window, three minutes
    (docs/systems/deltalog.md, "Outages"). Waiting for ``lock`` releases the
    GIL. A caller that decides on what it read and commits on that same
    snapshot (``locks``, ``job_models``) holds ``lock`` across both.
    """

    def __init__(self, spec: TableSpec, home: Home, clock: StoreClock | None = None) -> None:
        self.spec = spec
        self.path: Location = home.control_table(spec.name)
        self.clock: StoreClock = clock or store_clock(home.root)  # another clock: a test's host of its own
        self._dt: DeltaTable | None = None
        self._upgraded = False
        self._reads: dict[tuple[Any, ...], tuple[int, pa.Table]] = {}  # the last answers, by the version they read
        self.lock = threading.RLock()

    def now(self) -> datetime:
        """The store's time: what every timestamp a duration is judged by is written with (``storage.clock``)."""
        return self.clock.now()

    def load(self) -> DeltaTable | None:
        """The table at its latest version, or None when nothing was ever written to it."""
        with self.lock:
            if self._dt is None:
                self._dt = open_if_table(self.path)  # a damaged table: DamagedTableError naming it and what to do
            else:
                try:
                    refresh(self._dt)
                except StoreUnavailableError:
                    self._dt = None  # the next load opens the table afresh, with a client of its own
                    raise
            return self._dt

    def ensure(self) -> DeltaTable:
        """The table, created with its spec's schema if it does not exist yet."""
        with self.lock:
            dt = self.load()
            if dt is not None:
                if not self._upgraded:
                    self._upgrade(dt)
                return dt
            try:
                create_table(
                    self.path,
                    self.spec.schema,
                    mode="ignore",
                    partition_by=list(self.spec.partition_by),
                    name=self.spec.name,
                    description=self.spec.description,
                    configuration={"delta.appendOnly": "true"} if self.spec.append_only else None,
                )
            except DeltaError:
                if not is_table(self.path):
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
        with self.lock:
            dt = self.load()
            cols = list(columns) if columns is not None else self.spec.schema.names
            if dt is None:
                return self.spec.schema.empty_table().select(cols)
            key = (job, repr(list(where)), tuple(cols))
            version = dt.version()
            kept = self._reads.get(key)
            if kept is not None and kept[0] == version:  # nothing committed since: the same rows
                return kept[1]
            result = read_delta(dt, [("job", "=", job), *where], columns=cols, schema=self.spec.schema)
            if len(self._reads) >= 32:
                self._reads.clear()
            self._reads[key] = (version, result)
            return result

    def file_spans(self, job: str, column: str = "at") -> list[tuple[Any, Any]]:
        """``(min, max)`` of ``column`` in each of the job's files, from the log's statistics: no file is opened.

        Every committed batch adds a file, so the views find which files hold a recent window from here; a file
        whose statistics are missing (written without them) is left out.
        """
        with self.lock:
            dt = self.load()
            if dt is None:
                return []
            actions = pa.table(dt.get_add_actions(flatten=True))
        if f"max.{column}" not in actions.column_names:
            return []
        return [
            (low, high)
            for owner, low, high in zip(
                actions.column("partition.job").to_pylist(),
                actions.column(f"min.{column}").to_pylist(),
                actions.column(f"max.{column}").to_pylist(),
                strict=True,
            )
            if owner == job and low is not None and high is not None
        ]

    def jobs(self) -> set[str]:
        with self.lock:
            dt = self.load()
            if dt is None:
                return set()
            return {p["job"] for p in dt.partitions() if p.get("job")}

    def append(
        self, rows: list[dict[str, Any]], *, dt: DeltaTable | None = None, txn: Transaction | None = None
    ) -> None:
        """One Delta commit; with ``txn`` a concurrent commit carrying the same app id makes this one fail.

        ``dt`` commits on a snapshot the caller already read (a decision made
        on it must not land on a newer one unnoticed).
        """
        data = pa.Table.from_pylist(rows, schema=self.spec.schema)
        props = CommitProperties(app_transactions=[txn] if txn is not None else None, max_commit_retries=COMMIT_RETRIES)

        def write() -> None:
            with self.lock:
                append(dt if dt is not None else self.ensure(), data, commit_properties=props)

        if txn is None and dt is None:
            blind_append(write)
        else:
            write()

    def append_next(
        self,
        app_id: str,
        last: Callable[[], int],
        rows: Callable[[int], list[dict[str, Any]]],
        *,
        attempts: int = 20,
    ) -> int:
        """Append ``rows(n)`` with ``n = last() + 1`` under the app transaction ``app_id``; returns ``n``.

        The number orders rows by commit, with no clock: ``last()`` reads the
        highest number through this table (so on the snapshot this commit
        builds on), and of writers racing for one number exactly one commit
        lands; the others read again and take the next.
        """

        def commit() -> int:
            with self.lock:  # the number is read on the snapshot the commit builds on
                dt = self.ensure()
                n = last() + 1  # refreshes ``dt`` (the same handle) to the snapshot it read
                self.append(rows(n), dt=dt, txn=Transaction(app_id, n))
            return n

        return RETRY_BACKOFF.retry(commit, attempts=attempts, retriable=lost_commit_race)


def blind_append(write: Callable[[], None]) -> None:
    """Run ``write``, an append whose rows depend on nothing it read, again when its commit fails a conflict check
    (``BLIND_APPEND_ATTEMPTS`` in all): a failed commit wrote nothing, so the retry lands the same fact once."""
    RETRY_BACKOFF.retry(write, attempts=BLIND_APPEND_ATTEMPTS, retriable=lost_commit_race)


DELETE_ATTEMPTS = 10
"""How often a delete is run again after its commit failed a conflict check: delta-rs counts every append that lands
while it runs as new data it should have read. Only rows no reader asks for are deleted, and a later row never makes
an older one wanted again, so the same delete on the newer snapshot is still right."""


def delete_rows(dt: DeltaTable, predicate: str) -> int:
    """One delete commit of the rows matching ``predicate`` (delta-rs's SQL); the number of rows deleted.

    Used only for rows no reader asks for again (``checkpoints.prune_superseded``, ``metrics.expire``,
    ``adjunct.checkpoints.prune_store_checkpoints``). A blind append that lands beside it fails its own conflict
    check and is written again (``blind_append``).
    """

    def delete() -> int:
        done = dt.delete(predicate, commit_properties=CommitProperties(max_commit_retries=COMMIT_RETRIES))
        return int(done.get("num_deleted_rows", 0))

    return RETRY_BACKOFF.retry(
        delete, attempts=DELETE_ATTEMPTS, retriable=lost_commit_race, before_retry=lambda _: refresh(dt)
    )


def sql_text(text: str) -> str:
    """A string literal of delta-rs's SQL."""
    return "'" + text.replace("'", "''") + "'"


def check_int(what: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{what} must be a whole number >= {minimum}, got {value!r}")
