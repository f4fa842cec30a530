"""``DeltaLog``: the embedded input system, a partitioned append-only Delta table per stream, from its roles.

It is the input that needs no server, so a job, its tests and its demos need
only a directory. It behaves like a Kafka topic where the platform relies on
it: keys placed by Kafka's partitioner, dense offsets per partition, growth
by a multiple with a recorded expansion point. Each role is a module of this
package (``tables``, ``admin``, ``producer``, ``reader``); this class holds
them and answers the protocol, and pickles to its configuration. What it
guarantees, how it was verified and its limits: docs/systems/deltalog.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.errors import ConfigError
from pipelines.storage.location import Location, parse
from pipelines.storage.objects import store_for
from pipelines.systems.base import ComposedSystem, Position, StreamMetadata
from pipelines.systems.deltalog.admin import DeltaLogAdmin
from pipelines.systems.deltalog.compaction import Compaction, DeltaLogCompaction
from pipelines.systems.deltalog.layout import APP_ID, SYSTEM
from pipelines.systems.deltalog.producer import DeltaLogProducer
from pipelines.systems.deltalog.reader import DeltaLogReader
from pipelines.systems.deltalog.retention import DeltaLogRetention, Trim
from pipelines.systems.deltalog.tables import StreamTables
from pipelines.systems.offsets import OffsetOrder

if TYPE_CHECKING:
    from pipelines.systems.deltalog_settings import DeltaLogOptions


class DeltaLog(OffsetOrder, ComposedSystem):
    """The embedded log as an ``InputSystem``: admin, producer and consumer of the streams under one root.

    Every method that answers "what is there now" (``describe``,
    ``end_offsets``, ``produce``, ``expand``) reads the latest table version;
    ``read`` reuses the cached snapshot when it already covers the range.
    """

    admin: DeltaLogAdmin
    reader: DeltaLogReader
    producer: DeltaLogProducer

    system: str = SYSTEM

    def __init__(
        self,
        root: str | os.PathLike[str] | Location,
        *,
        max_attempts: int = 64,
        app_id: str = APP_ID,
        read_timeout_s: float = 30.0,
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigError(f"max_attempts must be a whole number >= 1, got {max_attempts!r}")
        if isinstance(read_timeout_s, bool) or not isinstance(read_timeout_s, int | float) or not read_timeout_s >= 0:
            raise ConfigError(f"read_timeout_s must be a number of seconds >= 0, got {read_timeout_s!r}")
        self.root = parse(root, what="the embedded log's folder")
        self.store = store_for(self.root)
        self.max_attempts = max_attempts
        self.app_id = app_id
        self.read_timeout_s = float(read_timeout_s)
        self.tables = StreamTables(self.root, self.store, app_id, self.read_timeout_s)
        self.admin = DeltaLogAdmin(self.tables, max_attempts)
        self.producer = DeltaLogProducer(self.tables, max_attempts)
        self.reader = DeltaLogReader(self.tables)
        self._retention = DeltaLogRetention(self.tables, max_attempts)
        self._compaction = DeltaLogCompaction(self.tables, self.reader)

    def __getstate__(self) -> dict[str, Any]:
        # DeltaTable handles belong to one process's Rust runtime; ship only the configuration.
        return {
            "root": self.root,
            "max_attempts": self.max_attempts,
            "app_id": self.app_id,
            "read_timeout_s": self.read_timeout_s,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["root"],
            max_attempts=state["max_attempts"],
            app_id=state["app_id"],
            read_timeout_s=state.get("read_timeout_s", 30.0),
        )

    def __repr__(self) -> str:
        return f"DeltaLog({str(self.root)!r})"

    # ----------------------------------------------------------------- admin

    def path(self, stream: str) -> str:
        """The Delta table of a stream (which need not exist): a local path or an ``s3://`` URI."""
        return self.tables.path(stream)

    def location(self, stream: str) -> Location:
        return self.tables.location(stream)

    def list_streams(self) -> list[str]:
        return self.tables.list_streams()

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata:
        """The stream's own retention from now on (``None``: the default's); it deletes nothing by itself."""
        return self.admin.set_retention(stream, retention_ms)

    def retention(self, stream: str) -> int | None:
        """The stream's own retention (ms, ``RETAIN_FOREVER``), ``None`` when the default applies."""
        return self.tables.latest(stream)[1].retention_ms

    def end_offsets(self, stream: str) -> dict[int, int]:
        """The next offset to be written, per partition, from the log's file statistics (this package's own view)."""
        return self.admin.end_offsets(stream)

    def positions_at(self, stream: str, at_ms: int) -> dict[int, Position]:
        return {p: str(o) for p, o in self.reader.positions_at(stream, at_ms).items()}

    def identity(self, stream: str) -> str:
        """The stream's Delta table id (its first commit's ``metaData.id``): a table deleted and created again
        under the stream's name has another one. Read from a fresh open, not the cached table, which a table
        made again under it would leave as it was."""
        return self.tables.identity(stream)

    def trim(self, stream: str, before_ms: int, unread_from: Mapping[int, int], *, dry_run: bool = False) -> Trim:
        """Remove each partition's leading files older than ``before_ms``, keeping its last file and what a reader
        has not read (``unread_from``): the embedded log's retention (``retention``)."""
        return self._retention.trim(stream, before_ms, unread_from, dry_run=dry_run)

    def compact(self, stream: str, target_bytes: int, max_span_ms: int, *, dry_run: bool = False) -> Compaction:
        """Merge each partition's runs of small files into one, offsets and order kept (``compaction``)."""
        return self._compaction.compact(stream, target_bytes, max_span_ms, dry_run=dry_run)

    def acknowledge(self, job: str, stream: str, positions: Mapping[int, Position]) -> None:
        """The embedded log has no tools of its own to show progress in: the checkpoints table is all there is."""

    def close(self) -> None:
        self.tables.clear()

    # -------------------------------------------------------------- consumer

    def files_for_range(self, stream: str, partition: int, start: int, end: int) -> list[str]:
        """The data files (paths relative to the table) a read of ``[start, end)`` opens, from statistics only."""
        return self.reader.files_for_range(stream, partition, start, end)

    def read_range(
        self, stream: str, partition: int, start: int, end: int, *, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Records at offsets ``[start, end)`` of one partition, in offset order, as ``LOG_SCHEMA``."""
        return self.reader.read_range(stream, partition, start, end, columns=columns)


def validate_settings(settings: Mapping[str, Any], where: str = "systems.deltalog") -> DeltaLogOptions:
    """The ``systems.deltalog`` section (``deltalog_settings.DeltaLogSettings``), as ``DeltaLog``'s keywords."""
    if isinstance(settings, Mapping) and not settings:
        return {}  # nothing to check: the workers that open the log need not load pydantic
    from pipelines.settings import check
    from pipelines.systems.deltalog_settings import DeltaLogSettings

    checked: DeltaLogSettings = check(DeltaLogSettings, settings, where)
    return {"read_timeout_s": checked.read_timeout_s} if "read_timeout_s" in checked.model_fields_set else {}
