"""One version of a stream's table, indexed for planning: each partition's files ordered by first offset.

Built once per table version from the Delta log's add actions and their
statistics, never from data files; building it checks that offsets are dense
across a partition's files, so a table modified outside the log is refused
rather than misread.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa
from deltalake import DeltaTable

from pipelines.errors import StreamError
from pipelines.systems.base import Expansion, PartitionMetadata, StreamMetadata
from pipelines.systems.deltalog.layout import SYSTEM, read_meta


@dataclass
class PartitionFiles:
    """One partition's files ordered by first offset; offsets are contiguous across them."""

    mins: list[int] = field(default_factory=list)
    maxs: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    @property
    def earliest(self) -> int:
        return self.mins[0] if self.mins else 0

    @property
    def end(self) -> int:
        return self.maxs[-1] + 1 if self.maxs else 0

    def overlapping(self, start: int, end: int) -> list[str]:
        """Files holding any offset of ``[start, end)``, found by bisection rather than a scan."""
        if start >= end or not self.mins:
            return []
        i = max(bisect.bisect_right(self.mins, start) - 1, 0)
        selected = []
        while i < len(self.mins) and self.mins[i] < end:
            if self.maxs[i] >= start:
                selected.append(self.paths[i])
            i += 1
        return selected


@dataclass
class Snapshot:
    """What a reader or writer needs from one table version, built once per version from the log."""

    version: int
    table_id: str
    partitions: int
    expansions: list[Expansion]
    files: dict[int, PartitionFiles]
    paths: frozenset[str]
    retention_ms: int | None = None
    """The stream's own retention (``core.segments.retention_ms``); ``None``: the default applies."""

    def partition_files(self, partition: int) -> PartitionFiles:
        return self.files.get(partition) or PartitionFiles()

    def end(self, partition: int) -> int:
        return self.partition_files(partition).end

    def describe(self, stream: str) -> StreamMetadata:
        partitions = {}
        for p in range(self.partitions):
            files = self.partition_files(p)
            partitions[p] = PartitionMetadata(
                partition=p,
                earliest=str(files.earliest),
                end=str(files.end),
                details={"files": len(files.paths), "bytes": sum(files.sizes)},  # when to compact (docs)
            )
        return StreamMetadata(
            system=SYSTEM,
            stream=stream,
            partitions=partitions,
            expansions=list(self.expansions),
            details={"id": self.table_id, "table_version": self.version, "retention_ms": self.retention_ms},
        )


def snapshot(stream: str, table: DeltaTable) -> Snapshot:
    """Index the live files by partition and first offset, and check offsets are dense across them."""
    version = table.version()
    partitions, expansions, retention_ms = read_meta(stream, table)
    actions = pa.table(table.get_add_actions(flatten=True))
    files: dict[int, PartitionFiles] = {}
    paths: list[str] = []
    if actions.num_rows:
        missing = {"path", "size_bytes", "partition.partition", "min.offset", "max.offset"} - set(actions.column_names)
        if missing:
            raise StreamError(f"stream {stream!r}: the Delta log lacks {sorted(missing)} for its files")
        paths = actions["path"].to_pylist()
        rows = sorted(
            zip(
                (int(p) for p in actions["partition.partition"].to_pylist()),
                actions["min.offset"].to_pylist(),
                actions["max.offset"].to_pylist(),
                paths,
                actions["size_bytes"].to_pylist(),
                strict=True,
            ),
            key=lambda r: (r[0], -1 if r[1] is None else r[1]),
        )
        for p, lo, hi, path, size in rows:
            if lo is None or hi is None:
                raise StreamError(f"stream {stream!r}: file {path} has no offset statistics")
            if not 0 <= p < partitions:
                raise StreamError(f"stream {stream!r} has {partitions} partitions but file {path} is in {p}")
            pf = files.setdefault(p, PartitionFiles())
            if pf.maxs and lo != pf.maxs[-1] + 1:
                raise StreamError(
                    f"stream {stream!r} partition {p}: offsets are not dense between {pf.paths[-1]} "
                    f"(ends at {pf.maxs[-1]}) and {path} (starts at {lo})"
                )
            pf.mins.append(lo)
            pf.maxs.append(hi)
            pf.paths.append(path)
            pf.sizes.append(size)
    return Snapshot(version, str(table.metadata().id), partitions, expansions, files, frozenset(paths), retention_ms)


class TimedFile(NamedTuple):
    """One live file with its offsets and its records' times (µs since the epoch; ``None`` without statistics)."""

    partition: int
    first: int
    last: int
    oldest_us: int | None
    newest_us: int | None
    path: str
    size: int


def timed_files(stream: str, table: DeltaTable) -> list[TimedFile]:
    """The live files in (partition, first offset) order, with their ``timestamp`` statistics, from the log alone.

    The caller holds the stream's lock: the DeltaTable is shared by its process's threads (``tables``).
    """
    actions = pa.table(table.get_add_actions(flatten=True))
    if not actions.num_rows:
        return []

    def micros(name: str) -> list[int | None]:
        if name not in actions.column_names:
            raise StreamError(f"stream {stream!r}: the Delta log has no timestamp statistics ({name})")
        column = actions[name].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        return column.to_pylist()  # type: ignore[no-any-return]

    return sorted(
        TimedFile(*row)
        for row in zip(
            (int(p) for p in actions["partition.partition"].to_pylist()),
            actions["min.offset"].to_pylist(),
            actions["max.offset"].to_pylist(),
            micros("min.timestamp"),
            micros("max.timestamp"),
            actions["path"].to_pylist(),
            actions["size_bytes"].to_pylist(),
            strict=True,
        )
    )
