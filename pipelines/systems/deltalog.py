"""The embedded input system: a partitioned, append-only Delta table per stream.

It is the input that needs no server, so a job, its tests and its demos need
only a directory. It behaves like a Kafka topic where the platform relies on
it: keys placed by Kafka's partitioner, dense offsets per partition, growth by
a multiple with a recorded expansion point. Concurrent producers keep offsets
dense by committing with one shared Delta application transaction, which
delta-rs refuses to let two racing commits both carry. What it guarantees, how
it was verified and its limits: docs/systems/deltalog.md.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction

from pipelines.backoff import Backoff
from pipelines.core.batchplan import expansion_holds
from pipelines.core.partitioner import murmur2
from pipelines.core.ssp import validate_name
from pipelines.deltaio import create_table, is_table, open_table, readable, refresh
from pipelines.errors import ConfigError, DamagedTableError, PartitionChangeError, StreamError
from pipelines.storage.location import Location, parse
from pipelines.storage.objects import store_for
from pipelines.systems.base import (
    RECORD_SCHEMA,
    Bounded,
    End,
    Expansion,
    PartitionMetadata,
    Position,
    ReadResult,
    Record,
    StreamMetadata,
)
from pipelines.systems.offsets import OffsetOrder, parse_offset

if TYPE_CHECKING:
    from pipelines.systems.deltalog_settings import DeltaLogOptions

SYSTEM = "deltalog"
APP_ID = "deltalog-writer"
META_KEY = "deltalog.stream"
META_FORMAT = 1

LOG_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("headers", pa.string()),
    ]
)
"""The table's own schema: offsets are int64 here; the protocol's records carry them as position strings."""
# Delta keeps partition values in the log, not in the data files.
_FILE_SCHEMA = pa.schema([f for f in LOG_SCHEMA if f.name != "partition"])

_COMMIT_RACE = Backoff(base_s=0.005, cap_s=0.25)
_STORAGE_WAIT = Backoff(base_s=0.05, cap_s=2.0)


@dataclass
class _PartitionFiles:
    """One partition's files ordered by first offset; offsets are contiguous across them."""

    mins: list[int] = field(default_factory=list)
    maxs: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

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
class _Snapshot:
    """What a reader or writer needs from one table version, built once per version from the log."""

    version: int
    table_id: str
    partitions: int
    expansions: list[Expansion]
    files: dict[int, _PartitionFiles]
    paths: frozenset[str]

    def partition_files(self, partition: int) -> _PartitionFiles:
        return self.files.get(partition) or _PartitionFiles()

    def end(self, partition: int) -> int:
        return self.partition_files(partition).end


class DeltaLog(OffsetOrder):
    """The embedded log as an ``InputSystem``: admin, producer and consumer of the streams under one root.

    Positions are decimal offset strings ("next offset to read"); this module
    is the only place that turns them into integers.

    Every method that answers "what is there now" (``describe``,
    ``end_offsets``, ``produce``, ``expand``) reads the latest table version;
    ``read`` reuses the cached snapshot when it already covers the range, so a
    consumer reading behind the end does not list the log on every call.
    """

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
        self._tables: dict[str, tuple[DeltaTable, _Snapshot]] = {}
        self._round_robin: dict[str, int] = {}

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
        return str(self.location(stream))

    def location(self, stream: str) -> Location:
        return self.root / validate_name("stream", stream)

    def list_streams(self) -> list[str]:
        folders = [e for e in self.store.list(self.root) if e.is_dir]
        return sorted(e.name for e in folders if self.store.list(e.location / "_delta_log"))

    def create(self, stream: str, partitions: int) -> StreamMetadata:
        path = self.path(stream)
        count = _validate_count(partitions)
        if is_table(path):
            raise StreamError(f"stream {stream!r} already exists in {self.root}")
        meta = {"format": META_FORMAT, "partitions": count, "expansions": []}
        try:
            create_table(
                path,
                _table_schema(meta),
                partition_by=["partition"],
                mode="error",
                name=stream,
                description=f"{SYSTEM} stream: partitioned append-only log, see pipelines/systems/deltalog.py",
                configuration={"delta.appendOnly": "true"},
                commit_properties=CommitProperties(custom_metadata={"deltalog.operation": "create"}),
            )
        except Exception as error:
            if is_table(path):  # another process created it between our check and our commit
                raise StreamError(f"stream {stream!r} already exists in {self.root}") from error
            raise
        return self.describe(stream)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        """Grow the partition count to a multiple of the current one, recording the expansion point.

        Asking for the current count is a no-op, so a retried expansion is safe.
        """
        count = _validate_count(partitions)
        for attempt in range(1, self.max_attempts + 1):
            table, snap = self._latest(stream)
            current = snap.partitions
            if count == current:
                return _describe(stream, snap)
            if count < current:
                raise PartitionChangeError(
                    f"stream {stream!r} has {current} partitions; shrinking to {count} is not possible "
                    "(keys would lose their order and partitions their offsets)"
                )
            if count % current:
                raise PartitionChangeError(
                    f"stream {stream!r} has {current} partitions; the new count must be a multiple of it "
                    f"(e.g. {2 * current} or {3 * current}), got {count}, so that every key moves from "
                    f"partition p only to partitions p' with p' mod {current} == p"
                )
            expansion = Expansion(
                from_partitions=current,
                to_partitions=count,
                end_offsets={p: str(snap.end(p)) for p in range(current)},
                at=datetime.now(UTC),
            )
            meta = {
                "format": META_FORMAT,
                "partitions": count,
                "expansions": [_expansion_to_json(e) for e in [*snap.expansions, expansion]],
            }
            try:
                table.alter.set_column_metadata(
                    "partition",
                    {META_KEY: json.dumps(meta, separators=(",", ":"))},
                    commit_properties=self._commit_properties(snap.version, "expand"),
                )
            except CommitFailedError:
                _backoff(attempt)
                continue
            return self.describe(stream)
        raise StreamError(
            f"could not expand stream {stream!r} after {self.max_attempts} attempts: "
            "concurrent producers or expansions kept committing first; retry later"
        )

    def describe(self, stream: str) -> StreamMetadata:
        return _describe(stream, self._latest(stream)[1])

    def end_offsets(self, stream: str) -> dict[int, int]:
        """The next offset to be written, per partition, from the log's file statistics (this module's own view)."""
        snap = self._latest(stream)[1]
        return {p: snap.end(p) for p in range(snap.partitions)}

    def end_positions(self, stream: str) -> dict[int, Position]:
        return {p: str(end) for p, end in self.end_offsets(stream).items()}

    def acknowledge(self, job: str, stream: str, positions: Mapping[int, Position]) -> None:
        """The embedded log has no tools of its own to show progress in: the checkpoints table is all there is."""

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int:
        """Offsets are dense here: every offset between two positions is a record."""
        return max(0, _offset(end) - _offset(start))

    def read_limits(self, stream: str, floors: Mapping[int, Position]) -> dict[int, Position | None]:
        """New partitions of an expansion are held back until their source is past the recorded expansion point."""
        expansions = self._latest(stream)[1].expansions
        return dict.fromkeys(expansion_holds(expansions, floors, _offset))

    def advance(
        self,
        stream: str,
        floors: Mapping[int, Position],
        records: Mapping[int, int],
        limits: Mapping[int, Position],
    ) -> dict[int, End]:
        return {p: str(min(_offset(floors[p]) + n, _offset(limits[p]))) for p, n in records.items()}

    def close(self) -> None:
        self._tables.clear()

    # -------------------------------------------------------------- producer

    def produce(self, stream: str, records: Iterable[Record]) -> list[tuple[int, Position]]:
        """Append records in one Delta commit; returns ``(partition, offset)`` per record, in input order.

        Non-null keys go to ``kafka_partition(key, n)``; null keys round-robin
        (docs/systems/deltalog.md). The partition count is re-read on every attempt, so
        a producer picks up an expansion made by anyone, anywhere.
        """
        keys: list[bytes | None] = []
        values: list[bytes] = []
        headers: list[str | None] = []
        # Kafka's partitioner is toPositive(murmur2(key)) mod n; hashing once keeps retries after an
        # expansion cheap. Null keys are marked -1.
        hashes: list[int] = []
        for i, record in enumerate(records):
            try:
                key, value, header = record
            except (TypeError, ValueError):
                raise StreamError(f"record {i} must be a (key, value, headers) tuple, got {record!r:.80}") from None
            if key is None:
                hashes.append(-1)
            elif isinstance(key, bytes | bytearray | memoryview):
                hashes.append(murmur2(bytes(key)) & 0x7FFFFFFF)
            else:
                raise StreamError(f"record {i}: key must be bytes or None, got {type(key).__name__}")
            if not isinstance(value, bytes | bytearray | memoryview):
                raise StreamError(f"record {i}: value must be bytes, got {type(value).__name__}")
            keys.append(key)
            values.append(value)
            headers.append(_encode_headers(i, header))
        if not values:
            return []
        body = pa.table(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "headers": pa.array(headers, pa.string()),
            }
        )
        nulls = hashes.count(-1)
        rr_start = self._round_robin.get(stream)
        if rr_start is None:
            rr_start = random.randrange(1 << 30)

        for attempt in range(1, self.max_attempts + 1):
            table, snap = self._latest(stream)
            n = snap.partitions
            groups: dict[int, list[int]] = {}
            ends: dict[int, int] = {}
            placed: list[tuple[int, int]] = []
            rr = rr_start
            for i, h in enumerate(hashes):
                if h < 0:
                    p = rr % n
                    rr += 1
                else:
                    p = h % n
                group = groups.get(p)
                if group is None:
                    groups[p] = group = []
                    ends[p] = snap.end(p)
                placed.append((p, str(ends[p] + len(group))))
                group.append(i)

            written: list[Location] = []
            adds: list[AddAction] = []
            try:
                adds = self._write_files(stream, body, groups, ends, written)
                table.create_write_transaction(
                    adds,
                    "append",
                    table.schema(),
                    partition_by=["partition"],
                    commit_properties=self._commit_properties(snap.version, "produce"),
                )
            except CommitFailedError:
                if self._landed(stream, [a.path for a in adds]):
                    break
                self._remove(written)
                _backoff(attempt)
                continue
            except BaseException:
                self._remove(written)
                raise
            break
        else:
            raise StreamError(
                f"could not append to stream {stream!r} after {self.max_attempts} attempts: "
                "other producers kept committing first; batch records into fewer, larger produce calls"
            )
        self._round_robin[stream] = rr_start + nulls
        return placed

    def _write_files(
        self,
        stream: str,
        body: pa.Table,
        groups: dict[int, list[int]],
        ends: dict[int, int],
        written: list[Location],
    ) -> list[AddAction]:
        root = self.location(stream)
        filesystem = self.store.filesystem()
        now = datetime.now(UTC)
        now = now.replace(microsecond=now.microsecond // 1000 * 1000)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
        ts = pa.scalar(now, pa.timestamp("us", tz="UTC"))
        adds = []
        for p, rows in sorted(groups.items()):
            n, first = len(rows), ends[p]
            part = body if n == body.num_rows else body.take(pa.array(rows, pa.int64()))
            data = pa.Table.from_arrays(
                [
                    pa.array(range(first, first + n), pa.int64()),
                    part["key"],
                    part["value"],
                    pa.repeat(ts, n),
                    part["headers"],
                ],
                schema=_FILE_SCHEMA,
            )
            rel = f"partition={p}/{first:020d}-{uuid.uuid4().hex}.parquet"
            target = root / rel
            self.store.makedirs(target.parent)
            written.append(target)
            with filesystem.open_output_stream(self.store.arrow_path(target)) as out:
                pq.write_table(data, out)
                size = out.tell()
            stats = {
                "numRecords": n,
                "minValues": {"offset": first, "timestamp": stamp},
                "maxValues": {"offset": first + n - 1, "timestamp": stamp},
                "nullCount": {
                    "offset": 0,
                    "key": part["key"].null_count,
                    "value": 0,
                    "timestamp": 0,
                    "headers": part["headers"].null_count,
                },
            }
            adds.append(
                AddAction(
                    path=rel,
                    size=size,
                    partition_values={"partition": str(p)},
                    modification_time=int(time.time() * 1000),
                    data_change=True,
                    stats=json.dumps(stats, separators=(",", ":")),
                )
            )
        return adds

    def _landed(self, stream: str, paths: list[str]) -> bool:
        """Whether a commit reported as failed is in the log anyway; its files must not be deleted then."""
        try:
            snap = self._latest(stream)[1]
        except StreamError:
            return False
        return bool(paths) and all(p in snap.paths for p in paths)

    def _commit_properties(self, read_version: int, operation: str) -> CommitProperties:
        # The shared app id is what makes delta-rs reject a commit that raced another (docs/systems/deltalog.md).
        return CommitProperties(
            app_transactions=[Transaction(app_id=self.app_id, version=read_version + 1)],
            custom_metadata={"deltalog.operation": operation},
        )

    def _remove(self, paths: list[Location]) -> None:
        for path in paths:
            self.store.delete(path)

    # -------------------------------------------------------------- consumer

    def files_for_range(self, stream: str, partition: int, start: int, end: int) -> list[str]:
        """The data files (paths relative to the table) a read of ``[start, end)`` opens, from statistics only."""
        return self._plan(stream, partition, start, end)

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        """``[start, end)``, or with a ``Bounded`` end at most ``end.records`` records from ``start``."""
        first = _offset(start)
        if isinstance(end, Bounded):
            last = min(first + max(end.records, 0), self._plan_end(stream, partition))
        else:
            last = _offset(end)
        data = self._waiting_for_storage(
            stream, lambda: self.read_range(stream, partition, first, max(first, last), columns=columns)
        )
        columns_out = [data.column(n) if n != "offset" else data.column(n).cast(pa.string()) for n in LOG_SCHEMA.names]
        records = pa.Table.from_arrays(columns_out, schema=RECORD_SCHEMA)
        return ReadResult(records, str(max(first, last)), bytes_fetched=data.nbytes)

    def read_range(
        self, stream: str, partition: int, start: int, end: int, *, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """Records at offsets ``[start, end)`` of one partition, in offset order, as ``LOG_SCHEMA``.

        The range must lie within ``[earliest, end offset]``; asking past the
        end is an error rather than a short read, so a caller never mistakes
        "not written yet" for "no records".
        """
        files = self._plan(stream, partition, start, end)
        if start == end:
            return LOG_SCHEMA.empty_table()
        root = self.location(stream)
        filters = [("offset", ">=", start), ("offset", "<", end)]
        wanted = None if columns is None else [c for c in _FILE_SCHEMA.names if c in columns or c == "offset"]
        filesystem = self.store.filesystem()
        with readable(root):
            parts = [
                pq.read_table(
                    self.store.arrow_path(_data_file(root, rel)),
                    schema=_FILE_SCHEMA,
                    filters=filters,
                    columns=wanted,
                    filesystem=filesystem,
                )
                for rel in files
            ]
        data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        offsets = data["offset"].combine_chunks()
        if (
            data.num_rows != end - start
            or offsets[0].as_py() != start
            or offsets[-1].as_py() != end - 1
            # with the count and both ends right, strictly increasing means exactly the range
            or (data.num_rows > 1 and pc.min(pc.pairwise_diff(offsets)).as_py() < 1)
        ):
            raise StreamError(
                f"stream {stream!r} partition {partition}: files {files} do not hold exactly offsets "
                f"[{start}, {end}) (got {data.num_rows} rows); the table was modified outside {SYSTEM}"
            )
        arrays = [
            data.column(f.name) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
            for f in _FILE_SCHEMA
        ]
        return pa.Table.from_arrays(
            [pa.repeat(pa.scalar(partition, pa.int32()), data.num_rows), *arrays],
            schema=LOG_SCHEMA,
        )

    def _plan_end(self, stream: str, partition: int) -> int:
        snap = self._latest(stream)[1]
        if partition >= snap.partitions:
            raise StreamError(f"stream {stream!r} has partitions 0..{snap.partitions - 1}, not {partition}")
        return snap.end(partition)

    def _plan(self, stream: str, partition: int, start: int, end: int) -> list[str]:
        for name, value in (("partition", partition), ("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise StreamError(f"{name} must be an integer >= 0, got {value!r}")
        if start > end:
            raise StreamError(f"start offset {start} is after end offset {end}")
        cached = self._tables.get(stream)
        snap = cached[1] if cached else self._latest(stream)[1]
        if partition >= snap.partitions or end > snap.end(partition):
            snap = self._latest(stream)[1]
        if partition >= snap.partitions:
            raise StreamError(f"stream {stream!r} has partitions 0..{snap.partitions - 1}, not {partition}")
        files = snap.partition_files(partition)
        if end > files.end:
            raise StreamError(
                f"stream {stream!r} partition {partition} ends at offset {files.end}; cannot read up to {end}"
            )
        if start < files.earliest:
            raise StreamError(
                f"stream {stream!r} partition {partition} starts at offset {files.earliest}; cannot read from {start}"
            )
        return files.overlapping(start, end)

    # ------------------------------------------------------------- storage

    def _storage_gone(self, stream: str) -> bool:
        """The stream's log is not there (any error asking counts): its storage went away, or does not answer."""
        try:
            return not self.store.list(self.location(stream) / "_delta_log")
        except Exception:
            return True

    def _unavailable(self, stream: str, error: BaseException | None = None) -> StreamError:
        cause = f": {type(error).__name__}: {str(error)[:200]}" if error is not None else ""
        return StreamError(f"stream {stream!r}: its storage is unavailable ({self.path(stream)} is not there{cause})")

    def _waiting_for_storage(self, stream: str, read: Any) -> Any:
        """``read()``, waited out while the stream's storage is gone (at most ``read_timeout_s``); damage raises."""
        deadline = time.monotonic() + self.read_timeout_s
        attempt = 0
        while True:
            try:
                return read()
            except (StreamError, DamagedTableError, OSError) as error:
                if not self._storage_gone(stream):
                    raise
                if time.monotonic() >= deadline:
                    raise StreamError(
                        f"{self._unavailable(stream, error)}; a read waited {self.read_timeout_s:g}s for it"
                    ) from None
                self._tables.pop(stream, None)  # the snapshot is re-read when the storage is back
                _STORAGE_WAIT.wait(attempt, deadline)
                attempt += 1

    # ------------------------------------------------------------- snapshots

    def _latest(self, stream: str) -> tuple[DeltaTable, _Snapshot]:
        if stream in self._tables and self._storage_gone(stream):  # delta-rs finds "no new commit" in nothing
            raise self._unavailable(stream)
        try:
            return self._latest_snapshot(stream)
        except (DamagedTableError, OSError) as error:
            if stream in self._tables and self._storage_gone(stream):  # it was there: an outage, not damage
                raise self._unavailable(stream, error) from None
            raise

    def _latest_snapshot(self, stream: str) -> tuple[DeltaTable, _Snapshot]:
        cached = self._tables.get(stream)
        if cached is None:
            path = self.path(stream)
            if not is_table(path):
                existing = self.list_streams()
                raise StreamError(
                    f"stream {stream!r} does not exist in {self.root}; existing streams: "
                    + (", ".join(existing) if existing else "none")
                )
            table = open_table(path)
        else:
            table, snap = cached
            refresh(table)
            if table.version() == snap.version:
                return cached
        with readable(self.path(stream)):
            snap = _snapshot(stream, table)
        self._tables[stream] = (table, snap)
        return table, snap


def validate_settings(settings: Mapping[str, Any], where: str = "systems.deltalog") -> DeltaLogOptions:
    """The ``systems.deltalog`` section (``deltalog_settings.DeltaLogSettings``), as ``DeltaLog``'s keywords."""
    if isinstance(settings, Mapping) and not settings:
        return {}  # nothing to check: the workers that open the log need not load pydantic
    from pipelines.settings import check
    from pipelines.systems.deltalog_settings import DeltaLogSettings

    checked: DeltaLogSettings = check(DeltaLogSettings, settings, where)
    return {"read_timeout_s": checked.read_timeout_s} if "read_timeout_s" in checked.model_fields_set else {}


def position_key(position: Position) -> int:
    """The order of this system's positions, without a client (offline tools, e.g. ``model migrate``)."""
    return _offset(position)


def _offset(position: Position) -> int:
    return parse_offset(SYSTEM, position)


def _validate_count(partitions: object) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ConfigError(f"partition count must be a whole number >= 1, got {partitions!r}")
    if partitions < 1:
        raise ConfigError(f"partition count must be >= 1, got {partitions}")
    return partitions


def _encode_headers(index: int, headers: Mapping[str, str] | None) -> str | None:
    if headers is None:
        return None
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise StreamError(f"record {index}: headers must be a mapping of str to str or None, got {headers!r:.80}")
    return json.dumps(dict(headers), separators=(",", ":"), ensure_ascii=False)


def _table_schema(meta: dict[str, Any]) -> pa.Schema:
    partition = LOG_SCHEMA.field("partition").with_metadata({META_KEY: json.dumps(meta, separators=(",", ":"))})
    return LOG_SCHEMA.set(0, partition)


def _expansion_to_json(expansion: Expansion) -> dict[str, Any]:
    return {
        "from_partitions": expansion.from_partitions,
        "to_partitions": expansion.to_partitions,
        "end_offsets": {str(p): o for p, o in sorted(expansion.end_offsets.items())},
        "at": expansion.at.isoformat(),
    }


def _read_meta(stream: str, table: DeltaTable) -> tuple[int, list[Expansion]]:
    raw = None
    for f in table.schema().fields:
        if f.name == "partition":
            raw = f.metadata.get(META_KEY)
    if raw is None:
        raise StreamError(f"{table.table_uri} is a Delta table but not a {SYSTEM} stream (no {META_KEY!r} metadata)")
    try:
        meta = json.loads(raw)
        partitions = int(meta["partitions"])
        expansions = [
            Expansion(
                from_partitions=int(e["from_partitions"]),
                to_partitions=int(e["to_partitions"]),
                end_offsets={int(p): str(o) for p, o in e["end_offsets"].items()},
                at=datetime.fromisoformat(e["at"]),
            )
            for e in meta["expansions"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise StreamError(f"stream {stream!r} has unreadable {META_KEY!r} metadata: {raw!r:.200}") from error
    return partitions, expansions


def _snapshot(stream: str, table: DeltaTable) -> _Snapshot:
    """Index the live files by partition and first offset, and check offsets are dense across them."""
    version = table.version()
    partitions, expansions = _read_meta(stream, table)
    actions = pa.table(table.get_add_actions(flatten=True))
    files: dict[int, _PartitionFiles] = {}
    paths: list[str] = []
    if actions.num_rows:
        missing = {"path", "partition.partition", "min.offset", "max.offset"} - set(actions.column_names)
        if missing:
            raise StreamError(f"stream {stream!r}: the Delta log lacks {sorted(missing)} for its files")
        paths = actions["path"].to_pylist()
        rows = sorted(
            zip(
                (int(p) for p in actions["partition.partition"].to_pylist()),
                actions["min.offset"].to_pylist(),
                actions["max.offset"].to_pylist(),
                paths,
                strict=True,
            ),
            key=lambda r: (r[0], -1 if r[1] is None else r[1]),
        )
        for p, lo, hi, path in rows:
            if lo is None or hi is None:
                raise StreamError(f"stream {stream!r}: file {path} has no offset statistics")
            if not 0 <= p < partitions:
                raise StreamError(f"stream {stream!r} has {partitions} partitions but file {path} is in {p}")
            pf = files.setdefault(p, _PartitionFiles())
            if pf.maxs and lo != pf.maxs[-1] + 1:
                raise StreamError(
                    f"stream {stream!r} partition {p}: offsets are not dense between {pf.paths[-1]} "
                    f"(ends at {pf.maxs[-1]}) and {path} (starts at {lo})"
                )
            pf.mins.append(lo)
            pf.maxs.append(hi)
            pf.paths.append(path)
    return _Snapshot(version, str(table.metadata().id), partitions, expansions, files, frozenset(paths))


def _describe(stream: str, snap: _Snapshot) -> StreamMetadata:
    partitions = {}
    for p in range(snap.partitions):
        files = snap.partition_files(p)
        partitions[p] = PartitionMetadata(partition=p, earliest=str(files.earliest), end=str(files.end))
    return StreamMetadata(
        system=SYSTEM,
        stream=stream,
        partitions=partitions,
        expansions=list(snap.expansions),
        details={"id": snap.table_id, "table_version": snap.version},
    )


def _data_file(root: Location, rel: str) -> Location:
    """A data file of the table; the log may hold it percent-encoded or as an absolute URI."""
    if "://" in rel:
        parsed = urlparse(rel)
        return parse(unquote(parsed.path) if parsed.scheme == "file" else rel, what="a data file")
    return root / unquote(rel)


def _backoff(attempt: int) -> None:
    # Full jitter: racing producers spread out instead of colliding again in lockstep.
    _COMMIT_RACE.wait(attempt)
