"""The embedded log's admin side: creating streams, growing them by a multiple, ends and batch plans.

An expansion records each old partition's end offset as its expansion point
in the table's metadata, in one commit, so readers hold the new partitions
back until their source partition is past it (``core.batchplan``); asking for
the current count is a no-op, so a retried expansion is safe. See
docs/systems/deltalog.md, "Expansion".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from pipelines.core.batchplan import expansion_holds
from pipelines.core.groupers import check_growth
from pipelines.core.segments import valid_retention
from pipelines.deltaio import create_table, is_table
from pipelines.errors import StreamError
from pipelines.systems.base import End, Expansion, Position, Positions, StreamMetadata
from pipelines.systems.deltalog.layout import (
    META_KEY,
    SYSTEM,
    meta_json,
    offset,
    stream_meta,
    table_schema,
    validate_count,
)
from pipelines.systems.deltalog.tables import COMMIT_RACE, StreamTables


class DeltaLogAdmin:
    """Creates, grows and describes the streams under one root."""

    def __init__(self, tables: StreamTables, max_attempts: int) -> None:
        self.tables = tables
        self.max_attempts = max_attempts

    def create(self, stream: str, partitions: int, retention_ms: int | None = None) -> StreamMetadata:
        """A new stream; ``retention_ms`` its own retention (``core.segments.retention_ms``), else the default's."""
        path = self.tables.path(stream)
        count = validate_count(partitions)
        valid_retention(retention_ms)
        if is_table(path):
            raise StreamError(f"stream {stream!r} already exists in {self.tables.root}")
        meta = stream_meta(count, [], retention_ms)
        try:
            create_table(
                path,
                table_schema(meta),
                partition_by=["partition"],
                mode="error",
                name=stream,
                description=f"{SYSTEM} stream: partitioned append-only log, see pipelines/systems/deltalog/",
                configuration={"delta.appendOnly": "true"},
                commit_properties=CommitProperties(custom_metadata={"deltalog.operation": "create"}),
            )
        except Exception as error:
            if is_table(path):  # another process created it between our check and our commit
                raise StreamError(f"stream {stream!r} already exists in {self.tables.root}") from error
            raise
        return self.describe(stream)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        """Grow the partition count to a multiple of the current one, recording the expansion point.

        Asking for the current count is a no-op, so a retried expansion is safe.
        """
        count = validate_count(partitions)
        for _ in COMMIT_RACE.attempts(self.max_attempts):
            table, snap = self.tables.latest(stream)
            current = snap.partitions
            if count == current:
                return snap.describe(stream)
            check_growth(f"stream {stream!r}", current, count)
            expansion = Expansion(
                from_partitions=current,
                to_partitions=count,
                end_offsets={p: str(snap.end(p)) for p in range(current)},
                at=datetime.now(UTC),
            )
            meta = stream_meta(count, [*snap.expansions, expansion], snap.retention_ms)
            if self._set_meta(table, snap.version, meta, "expand"):
                return self.describe(stream)
        raise StreamError(
            f"could not expand stream {stream!r} after {self.max_attempts} attempts: "
            "concurrent producers or expansions kept committing first; retry later"
        )

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata:
        """Set the stream's own retention (``None``: back to the default), as Kafka's ``kafka-configs --alter``
        sets a topic's ``retention.ms``; what it already is, is a no-op. It deletes nothing by itself: the next
        ``stream trim`` or ``stream_maintenance`` run applies it."""
        valid_retention(retention_ms)
        for _ in COMMIT_RACE.attempts(self.max_attempts):
            table, snap = self.tables.latest(stream)
            if snap.retention_ms == retention_ms:
                return snap.describe(stream)
            meta = stream_meta(snap.partitions, snap.expansions, retention_ms)
            if self._set_meta(table, snap.version, meta, "alter"):
                return self.describe(stream)
        raise StreamError(
            f"could not alter stream {stream!r} after {self.max_attempts} attempts: "
            "concurrent producers kept committing first; retry later"
        )

    def _set_meta(self, table: DeltaTable, read_version: int, meta: dict[str, Any], operation: str) -> bool:
        """One commit of the stream's metadata on top of ``read_version``; ``False`` when another commit came first,
        so that the caller re-reads and decides again."""
        try:
            with self.tables.lock:  # the DeltaTable is this process's, shared by its threads (StreamTables)
                table.alter.set_column_metadata(
                    "partition",
                    {META_KEY: meta_json(meta)},
                    commit_properties=self.tables.commit_properties(read_version, operation),
                )
        except CommitFailedError:
            return False
        return True

    def describe(self, stream: str) -> StreamMetadata:
        return self.tables.latest(stream)[1].describe(stream)

    def end_offsets(self, stream: str) -> dict[int, int]:
        """The next offset to be written, per partition, from the log's file statistics (this package's own view)."""
        snap = self.tables.latest(stream)[1]
        return {p: snap.end(p) for p in range(snap.partitions)}

    def end_positions(self, stream: str) -> dict[int, Position]:
        return {p: str(end) for p, end in self.end_offsets(stream).items()}

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int:
        """Offsets are dense here: every offset between two positions is a record."""
        return max(0, offset(end) - offset(start))

    def read_limits(self, stream: str, floors: Mapping[int, Position]) -> dict[int, Position | None]:
        """New partitions of an expansion are held back until their source is past the recorded expansion point."""
        expansions = self.tables.latest(stream)[1].expansions
        return dict.fromkeys(expansion_holds(expansions, floors, offset))

    def advance(self, stream: str, floors: Positions, records: Mapping[int, int], limits: Positions) -> dict[int, End]:
        return {p: str(min(offset(floors[p]) + n, offset(limits[p]))) for p, n in records.items()}
