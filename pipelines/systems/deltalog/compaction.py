"""The embedded log's compaction: runs of small files merged into one, their offsets and order kept.

Every producer commit adds a file per partition, so a stream fed by small
commits collects many small files, and every read and every snapshot pays
for each. Delta's own ``OPTIMIZE`` (delta-rs's ``compact``) bins files by
size, not by offset, and its writer does not keep rows in the order given
(both checked), so neither may touch a stream. This merges what
``core.segments.compaction_runs`` picks: each run of consecutive files is read
in offset order (``reader.read_range`` checks it), written as one file with
its statistics (``files.write_file``), and swapped in by one Delta commit of
that add and the run's removes, all with ``dataChange=false``, which an
append-only table allows. A trim or another compaction that removed one of
those files meanwhile makes delta-rs refuse the swap: the run is left as it
is and its new file deleted. See docs/systems/deltalog.md, "Compaction".
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from deltalake import CommitProperties
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from pipelines.core.segments import Segment, compaction_runs
from pipelines.errors import StreamError
from pipelines.storage.location import Location
from pipelines.systems.deltalog.files import write_file
from pipelines.systems.deltalog.reader import DeltaLogReader
from pipelines.systems.deltalog.snapshot import TimedFile, timed_files
from pipelines.systems.deltalog.tables import StreamTables


@dataclass(frozen=True)
class MergedRun:
    """One run of a partition's files, offsets ``[first, last]``, merged (or, in a dry run, to be)."""

    partition: int
    first: int
    last: int
    files: int
    bytes_before: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Compaction:
    """A whole compaction: the runs merged, and each partition's file count before and after."""

    stream: str
    runs: list[MergedRun]
    files_before: dict[int, int]
    files_after: dict[int, int]


class DeltaLogCompaction:
    """Compacts the streams under one root."""

    def __init__(self, tables: StreamTables, reader: DeltaLogReader) -> None:
        self.tables = tables
        self.reader = reader

    def compact(self, stream: str, target_bytes: int, max_span_ms: int, *, dry_run: bool = False) -> Compaction:
        """Merge each partition's runs of small files: at most ``target_bytes`` and ``max_span_ms`` of record time
        each (``core.segments.compaction_runs``)."""
        table, _ = self.tables.latest(stream)
        with self.tables.lock:  # the DeltaTable is shared by this process's threads (StreamTables)
            files = timed_files(stream, table)
        by_partition: dict[int, list[TimedFile]] = {}
        for f in files:
            by_partition.setdefault(f.partition, []).append(f)
        planned: list[MergedRun] = []
        for p, mine in sorted(by_partition.items()):
            segments = [Segment(f.first, f.last, _ms(f.newest_us), _ms(f.oldest_us), f.size) for f in mine]
            for i, j in compaction_runs(segments, target_bytes, max_span_ms):
                chosen = mine[i:j]
                planned.append(
                    MergedRun(
                        p,
                        chosen[0].first,
                        chosen[-1].last,
                        len(chosen),
                        sum(f.size for f in chosen),
                        tuple(f.path for f in chosen),
                    )
                )
        before = {p: len(mine) for p, mine in by_partition.items()}
        if dry_run or not planned:
            after = dict(before)
            for run in planned:
                after[run.partition] -= run.files - 1
            return Compaction(stream, planned, before, after)
        merged = [run for run in planned if self._merge(stream, run)]
        if merged:
            self.tables.delete_removed_files(stream)
        now = self.tables.latest(stream)[1]
        after = {p: len(now.partition_files(p).paths) for p in before}
        return Compaction(stream, merged, before, after)

    def _merge(self, stream: str, run: MergedRun) -> bool:
        """Swap the run's files for one; False when a trim or another compaction changed them first."""
        try:
            data = self.reader.read_range(stream, run.partition, run.first, run.last + 1)
        except StreamError:
            if not set(run.paths) <= self.tables.latest(stream)[1].paths:
                return False  # a trim, or another compaction, got there first
            raise
        written: list[Location] = []
        add: AddAction | None = None
        try:
            add = write_file(
                self.tables, stream, run.partition, data.drop_columns(["partition"]), written, data_change=False
            )
            now_ms = int(time.time() * 1000)
            removes = [
                RemoveAction(path, False, now_ms, partition_values={"partition": str(run.partition)})
                for path in run.paths
            ]
            table, snap = self.tables.latest(stream)
            if not set(run.paths) <= snap.paths:
                self._delete(written)
                return False  # a trim, or another compaction, got there first
            with self.tables.lock:
                table.create_write_transaction(
                    [add, *removes],
                    "append",
                    table.schema(),
                    partition_by=["partition"],
                    commit_properties=CommitProperties(custom_metadata={"deltalog.operation": "compact"}),
                )
        except CommitFailedError:
            assert add is not None  # only the commit raises it
            if add.path in self.tables.latest(stream)[1].paths:
                return True  # reported failed, but in the log: its file stays
            self._delete(written)
            return False
        except BaseException:
            # An interrupt during delta-rs's commit is raised just after it returns, the merged file then committed
            # and the run's files removed from the log: deleting it would lose the run's records.
            if not self._maybe_committed(stream, add):
                self._delete(written)
            raise
        return True

    def _maybe_committed(self, stream: str, add: AddAction | None) -> bool:
        """Whether the merged file may be in the log (kept when the log cannot be read: an orphan is harmless)."""
        if add is None:
            return False
        try:
            return add.path in self.tables.latest(stream)[1].paths
        except Exception:
            return True

    def _delete(self, written: list[Location]) -> None:
        for path in written:
            self.tables.store.delete(path)


def _ms(micros: int | None) -> int:
    return 0 if micros is None else micros // 1000
