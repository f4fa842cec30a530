"""The streams under one root: their Delta tables, the latest snapshot of each, commits, and storage outages.

Shared by the admin, producer and reader of one ``DeltaLog``. A snapshot is
rebuilt only when the table has a new version. Every commit carries one
shared Delta application transaction, which delta-rs refuses to let two
racing commits both carry: that is what keeps offsets dense with several
producers (docs/systems/deltalog.md, "Producers"). A stream whose storage went
away is an outage, waited out by reads for ``read_timeout_s``, not damage
(docs/systems/deltalog.md, "Outages").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from pipelines.backoff import Backoff
from pipelines.core.ssp import validate_name
from pipelines.deltaio import open_if_table, readable, refresh
from pipelines.errors import DamagedTableError, StoreUnavailableError, StreamError
from pipelines.storage.location import Location
from pipelines.storage.objects import ObjectStore
from pipelines.systems.deltalog.snapshot import Snapshot, snapshot

T = TypeVar("T")

FIRST_COMMIT = f"{0:020d}.json"
COMMIT_RACE = Backoff(base_s=0.005, cap_s=0.25)
"""Between commits that lost a race, re-read and retried (full jitter: racing producers spread out instead of
colliding again in lockstep)."""
_STORAGE_WAIT = Backoff(base_s=0.05, cap_s=2.0)


class StreamTables:
    """The tables of the streams under ``root``, each opened once per process and refreshed per version.

    Threads of the process take turns on the tables through ``lock`` (held while one refreshes or commits):
    a DeltaTable used by two threads at once can freeze the whole process (``control.table.ControlTable``).
    """

    def __init__(self, root: Location, store: ObjectStore, app_id: str, read_timeout_s: float) -> None:
        self.root = root
        self.store = store
        self.app_id = app_id
        self.read_timeout_s = read_timeout_s
        self._tables: dict[str, tuple[DeltaTable, Snapshot]] = {}
        self.lock = threading.RLock()

    def path(self, stream: str) -> str:
        """The Delta table of a stream (which need not exist): a local path or an ``s3://`` URI."""
        return str(self.location(stream))

    def location(self, stream: str) -> Location:
        return self.root / validate_name("stream", stream)

    def list_streams(self) -> list[str]:
        folders = [e for e in self.store.list(self.root) if e.is_dir]
        return sorted(e.name for e in folders if self.store.list(e.location / "_delta_log"))

    def clear(self) -> None:
        self._tables.clear()

    def identity(self, stream: str) -> str:
        """The table id from the first commit's ``metaData`` (one small read, no listing of the log: a running
        job asks every 10 s); from the table opened afresh once log cleanup has removed that commit."""
        first = self.location(stream) / "_delta_log" / FIRST_COMMIT
        try:
            for line in self.store.read_text(first).splitlines():
                action = json.loads(line) if line.strip() else {}
                if isinstance(action, dict) and isinstance(action.get("metaData"), dict):
                    return str(action["metaData"]["id"])
        except (FileNotFoundError, ValueError, KeyError):
            pass  # cleaned up (the id is in the checkpoint), or not a commit we can read: delta-rs reads it
        opened = open_if_table(self.path(stream))
        if opened is None:
            raise StreamError(f"stream {stream!r} does not exist in {self.root}")
        return str(opened.metadata().id)

    # ------------------------------------------------------------- snapshots

    def cached(self, stream: str) -> Snapshot:
        """The snapshot this process last read, else the latest (a reader behind the end lists no log)."""
        cached = self._tables.get(stream)
        return cached[1] if cached else self.latest(stream)[1]

    def latest(self, stream: str) -> tuple[DeltaTable, Snapshot]:
        if stream in self._tables and self.storage_gone(stream):  # delta-rs finds "no new commit" in nothing
            raise self.unavailable(stream)
        try:
            with self.lock:
                return self._latest_snapshot(stream)
        except StoreUnavailableError as error:  # deltaio's reads say so for every delta-rs and pyarrow call
            self._tables.pop(stream, None)  # the next try opens the table afresh, with a client of its own
            raise self.unavailable(stream, error) from error
        except (DamagedTableError, OSError) as error:
            if stream in self._tables and self.storage_gone(stream):  # it was there: an outage, not damage
                raise self.unavailable(stream, error) from None
            raise

    def _latest_snapshot(self, stream: str) -> tuple[DeltaTable, Snapshot]:
        cached = self._tables.get(stream)
        if cached is None:
            opened = open_if_table(self.path(stream))
            if opened is None:
                existing = self.list_streams()
                raise StreamError(
                    f"stream {stream!r} does not exist in {self.root}; existing streams: "
                    + (", ".join(existing) if existing else "none")
                )
            table = opened
        else:
            table, snap = cached
            refresh(table)
            if table.version() == snap.version:
                return cached
        with readable(self.path(stream)):
            snap = snapshot(stream, table)
        self._tables[stream] = (table, snap)
        return table, snap

    # --------------------------------------------------------------- commits

    def commit_properties(self, read_version: int, operation: str) -> CommitProperties:
        # The shared app id is what makes delta-rs reject a commit that raced another (docs/systems/deltalog.md).
        return CommitProperties(
            app_transactions=[Transaction(app_id=self.app_id, version=read_version + 1)],
            custom_metadata={"deltalog.operation": operation},
        )

    def delete_removed_files(self, stream: str, attempts: int = 8) -> bool:
        """Delete from storage the files the log records as removed (by a trim or a compaction); False if other
        commits kept winning, which leaves them to the next call.

        delta-rs's "lite" vacuum (``full=False``) with a retention of 0 hours: it deletes only files the log says
        were removed, never a file a producer has written and not committed yet, which a full vacuum would. Its
        two commits can lose to a racing property change, hence the attempts.
        """
        for _ in COMMIT_RACE.attempts(attempts):
            table, _ = self.latest(stream)
            try:
                with self.lock:
                    table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=False)
                return True
            except CommitFailedError:
                continue
        return False

    # --------------------------------------------------------------- storage

    def storage_gone(self, stream: str) -> bool:
        """The stream's log is not there (any error asking counts): its storage went away, or does not answer."""
        try:
            return not self.store.holds_any(self.location(stream) / "_delta_log")
        except Exception:
            return True

    def unavailable(self, stream: str, error: BaseException | None = None) -> StreamError:
        if isinstance(error, StoreUnavailableError):
            return StreamError(f"stream {stream!r}: its storage is unavailable ({error})")
        cause = f": {type(error).__name__}: {str(error)[:300]}" if error is not None else ""
        return StreamError(f"stream {stream!r}: its storage is unavailable ({self.path(stream)} is not there{cause})")

    def waiting_for_storage(self, stream: str, read: Callable[[], T]) -> T:
        """``read()``, waited out while the stream's storage is gone (at most ``read_timeout_s``); damage raises."""
        deadline = time.monotonic() + self.read_timeout_s
        for _ in _STORAGE_WAIT.attempts(deadline=deadline):
            try:
                return read()
            except (StreamError, DamagedTableError, StoreUnavailableError, OSError) as error:
                unanswered = isinstance(error, StoreUnavailableError) or isinstance(
                    error.__cause__,
                    StoreUnavailableError,  # latest()'s stream outage, raised from it
                )
                if not (unanswered or self.storage_gone(stream)):
                    raise
                if time.monotonic() >= deadline:
                    raise StreamError(
                        f"{self.unavailable(stream, error)}; a read waited {self.read_timeout_s:g}s for it"
                    ) from None
                self._tables.pop(stream, None)  # the snapshot is re-read when the storage is back
        raise AssertionError("unreachable: attempts without a count never end")
