"""The embedded log's retention: removing each partition's oldest files, as a Kafka broker deletes old segments.

``trim`` plans from the Delta log alone (``core.segments.trim_point`` over
each partition's files and their ``timestamp`` statistics), then removes the
files, by path, in one Delta commit of remove actions. Unlike a producer's,
that commit carries no application transaction: removing whole files below
the earliest kept offset changes neither an end offset nor a numbering, so
producers committing meanwhile need not make it start again (with the
transaction, a producer committing every few milliseconds kept a trim from
ever landing), while delta-rs refuses a removal of a file another commit
removed first, so two trims, or a trim and a compaction, cannot both land on
the same files. (A ``DELETE`` by predicate was the first version: run on a
state a compaction had changed, it rewrote a merged file that crossed the
planned earliest, through a writer that does not keep row order.) The table is append-only; the trim lifts
``delta.appendOnly`` for that one commit and sets it again, also when the
removal fails. The removed files are then deleted from storage
(``StreamTables.delete_removed_files``). See docs/systems/deltalog.md,
"Retention".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import RemoveAction

from pipelines.core.segments import Segment, Stop, trim_point
from pipelines.errors import StreamError
from pipelines.systems.deltalog.snapshot import Snapshot, timed_files
from pipelines.systems.deltalog.tables import COMMIT_RACE, StreamTables

APPEND_ONLY = "delta.appendOnly"

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
        for _ in COMMIT_RACE.attempts(self.max_attempts):
            table, snap = self.tables.latest(stream)
            with self.tables.lock:  # the DeltaTable is shared by this process's threads (StreamTables)
                plan, paths = _plan(stream, table, snap, before_ms, unread_from)
            trim = Trim(stream, before_ms, plan, None)
            if dry_run or not paths:
                return trim
            try:
                version = self._remove(stream, table, paths)
            except CommitFailedError:  # another trim or a compaction removed those files: plan again
                continue
            finally:
                self._seal(stream)
            if version is None:  # the files changed between the plan and the removal: plan again
                continue
            self._vacuum(stream)
            return Trim(stream, before_ms, plan, version)
        raise StreamError(
            f"could not trim stream {stream!r} after {self.max_attempts} attempts: producers or expansions kept "
            "committing first; retry later"
        )

    def _remove(self, stream: str, table: DeltaTable, paths: list[tuple[str, int]]) -> int | None:
        """Commit the removal of exactly the planned files; ``None`` when they are no longer all live.

        Lifting ``delta.appendOnly`` is a commit that brings the table up to date, so the planned files are checked
        against that state, not the plan's: a compaction may have merged some of them into a file that crosses the
        planned earliest. A removal that races one committing after the check is refused by delta-rs (a
        concurrent transaction removed a file this one removes).
        """
        with self.tables.lock:
            if table.metadata().configuration.get(APPEND_ONLY, "false").lower() == "true":
                table.alter.set_table_properties({APPEND_ONLY: "false"}, commit_properties=_operation("trim-open"))
            if not {path for path, _ in paths} <= self.tables.latest(stream)[1].paths:
                return None
            now_ms = int(time.time() * 1000)
            removes = [RemoveAction(path, True, now_ms, partition_values={"partition": str(p)}) for path, p in paths]
            table.create_write_transaction(
                [*removes], "append", table.schema(), partition_by=["partition"], commit_properties=_operation("trim")
            )
            return table.version()

    def _seal(self, stream: str) -> None:
        """Set ``delta.appendOnly`` again, retried past racing producers: the table is append-only between trims."""
        for _ in COMMIT_RACE.attempts(self.max_attempts):
            table, _ = self.tables.latest(stream)
            with self.tables.lock:
                if table.metadata().configuration.get(APPEND_ONLY, "false").lower() == "true":
                    return
                try:
                    table.alter.set_table_properties({APPEND_ONLY: "true"}, commit_properties=_operation("trim-close"))
                    return
                except CommitFailedError:
                    pass
        raise StreamError(
            f"stream {stream!r}: could not set {APPEND_ONLY} again after {self.max_attempts} attempts; the next "
            "'pipelines stream trim' sets it"
        )

    def _vacuum(self, stream: str) -> None:
        if not self.tables.delete_removed_files(stream):  # the removal has landed: the space waits for the next
            log.warning("stream %r: the trimmed files stay on storage until the next trim deletes them", stream)


def _plan(
    stream: str, table: DeltaTable, snap: Snapshot, before_ms: int, unread_from: Mapping[int, int]
) -> tuple[list[PartitionTrim], list[tuple[str, int]]]:
    segments: dict[int, list[Segment]] = {}
    paths: dict[int, list[str]] = {}
    for f in timed_files(stream, table):
        if f.newest_us is None:
            raise StreamError(f"stream {stream!r}: file {f.path} has no timestamp statistics")
        segments.setdefault(f.partition, []).append(Segment(f.first, f.last, f.newest_us // 1000, size=f.size))
        paths.setdefault(f.partition, []).append(f.path)
    plan: list[PartitionTrim] = []
    removed: list[tuple[str, int]] = []
    for p in range(snap.partitions):
        mine = segments.get(p, [])
        point = trim_point(mine, before_ms, unread_from.get(p))
        first = mine[0].first if mine else 0
        plan.append(PartitionTrim(p, first, point.earliest, point.records, point.files, point.stop, unread_from.get(p)))
        removed += [(path, p) for path in paths.get(p, [])[: point.files]]
    return plan, removed


def _operation(name: str) -> CommitProperties:
    # No application transaction (the module's docstring says why).
    return CommitProperties(custom_metadata={"deltalog.operation": name})
