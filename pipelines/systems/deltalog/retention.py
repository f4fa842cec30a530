"""The embedded log's retention: removing each partition's oldest files, as a Kafka broker deletes old segments.

``trim`` plans from the Delta log alone (``core.retention.trim_point`` over
each partition's files and their ``timestamp`` statistics), then removes the
files in one Delta commit. Unlike a producer's, that commit carries no
application transaction: removing whole files below the earliest kept offset
changes neither an end offset nor a numbering, so producers committing
meanwhile need not make it start again (with the transaction, a producer
committing every few milliseconds kept a trim from ever landing), and
delta-rs still refuses two removals of one file, so two trims cannot both
land on the same files. The table is append-only; the trim lifts
``delta.appendOnly`` for that one commit and sets it again, also when the
removal fails. The removed files are then deleted from storage by a "lite"
vacuum, which deletes only files the log says were removed, never a file a
producer wrote and has not committed yet. See docs/systems/deltalog.md,
"Retention".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from pipelines.core.retention import Segment, Stop, trim_point
from pipelines.errors import StreamError
from pipelines.systems.deltalog.snapshot import Snapshot, timed_files
from pipelines.systems.deltalog.tables import StreamTables

APPEND_ONLY = "delta.appendOnly"
VACUUM_ATTEMPTS = 8

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionTrim:
    """One partition's part of a trim: where it started and starts now, and what went."""

    partition: int
    earliest_before: int
    earliest: int
    records: int
    files: int
    stop: Stop
    unread_from: int | None  # the first offset a reader still has to read, as given to the trim


@dataclass(frozen=True)
class Trim:
    """A whole trim: per partition, and the table version that removed the files (``None``: nothing removed)."""

    stream: str
    before_ms: int
    partitions: list[PartitionTrim]
    version: int | None

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def files(self) -> int:
        return sum(p.files for p in self.partitions)


class DeltaLogRetention:
    """Trims the streams under one root."""

    def __init__(self, tables: StreamTables, max_attempts: int) -> None:
        self.tables = tables
        self.max_attempts = max_attempts

    def trim(self, stream: str, before_ms: int, unread_from: Mapping[int, int], *, dry_run: bool = False) -> Trim:
        """Remove, per partition, the leading files whose every record is older than ``before_ms``, short of the last
        file and of the file holding ``unread_from[p]`` (what some reader has not read yet)."""
        for attempt in range(1, self.max_attempts + 1):
            table, snap = self.tables.latest(stream)
            with self.tables.lock:  # the DeltaTable is shared by this process's threads (StreamTables)
                plan, paths = _plan(stream, table, snap, before_ms, unread_from)
            trim = Trim(stream, before_ms, plan, None)
            if dry_run or not paths:
                return trim
            try:
                version = self._remove(stream, table, plan, len(paths))
            except CommitFailedError:
                self.tables.commit_backoff(attempt)  # a producer, an expansion or another trim won: plan again
                continue
            finally:
                self._seal(stream)
            self._vacuum(stream)
            return Trim(stream, before_ms, plan, version)
        raise StreamError(
            f"could not trim stream {stream!r} after {self.max_attempts} attempts: producers or expansions kept "
            "committing first; retry later"
        )

    def _remove(self, stream: str, table: DeltaTable, plan: list[PartitionTrim], files: int) -> int:
        predicate = " OR ".join(f"(partition = {t.partition} AND offset < {t.earliest})" for t in plan if t.files)
        with self.tables.lock:
            if table.metadata().configuration.get(APPEND_ONLY, "false").lower() == "true":
                table.alter.set_table_properties({APPEND_ONLY: "false"}, commit_properties=_operation("trim-open"))
            metrics = table.delete(predicate, commit_properties=_operation("trim"))
            version = table.version()
        if metrics.get("num_added_files", 0) or metrics.get("num_removed_files") != files:
            # whole files by construction: anything else means the table changed in a way its log did not show
            raise StreamError(
                f"stream {stream!r}: the trim at table version {version} removed {metrics.get('num_removed_files')} "
                f"files and rewrote {metrics.get('num_added_files')} where {files} whole files were planned"
            )
        return version

    def _seal(self, stream: str) -> None:
        """Set ``delta.appendOnly`` again, retried past racing producers: the table is append-only between trims."""
        for attempt in range(1, self.max_attempts + 1):
            table, _ = self.tables.latest(stream)
            with self.tables.lock:
                if table.metadata().configuration.get(APPEND_ONLY, "false").lower() == "true":
                    return
                try:
                    table.alter.set_table_properties({APPEND_ONLY: "true"}, commit_properties=_operation("trim-close"))
                    return
                except CommitFailedError:
                    pass
            self.tables.commit_backoff(attempt)
        raise StreamError(
            f"stream {stream!r}: could not set {APPEND_ONLY} again after {self.max_attempts} attempts; the next "
            "'pipelines stream trim' sets it"
        )

    def _vacuum(self, stream: str) -> None:
        # "Lite" (full=False): only files the log records as removed, so a producer's uncommitted file is never
        # touched; retention 0 because nothing but a trim removes a stream's files, and the trim meant them gone.
        # Its two commits can lose to another trim's property change: tried again, and else left to the next trim's
        # vacuum (the files stay recorded as removed), since the removal itself has landed.
        for attempt in range(1, VACUUM_ATTEMPTS + 1):
            table, _ = self.tables.latest(stream)
            try:
                with self.tables.lock:
                    table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=False)
                return
            except CommitFailedError:
                self.tables.commit_backoff(attempt)
        log.warning("stream %r: the trimmed files stay on storage until the next trim deletes them", stream)


def _plan(
    stream: str, table: DeltaTable, snap: Snapshot, before_ms: int, unread_from: Mapping[int, int]
) -> tuple[list[PartitionTrim], list[str]]:
    segments: dict[int, list[Segment]] = {}
    paths: dict[int, list[str]] = {}
    for f in timed_files(stream, table):
        if f.newest_us is None:
            raise StreamError(f"stream {stream!r}: file {f.path} has no timestamp statistics")
        segments.setdefault(f.partition, []).append(Segment(f.first, f.last, f.newest_us // 1000))
        paths.setdefault(f.partition, []).append(f.path)
    plan: list[PartitionTrim] = []
    removed: list[str] = []
    for p in range(snap.partitions):
        mine = segments.get(p, [])
        point = trim_point(mine, before_ms, unread_from.get(p))
        first = mine[0].first if mine else 0
        plan.append(PartitionTrim(p, first, point.earliest, point.records, point.files, point.stop, unread_from.get(p)))
        removed += paths.get(p, [])[: point.files]
    return plan, removed


def _operation(name: str) -> CommitProperties:
    # No application transaction (the module's docstring says why).
    return CommitProperties(custom_metadata={"deltalog.operation": name})
