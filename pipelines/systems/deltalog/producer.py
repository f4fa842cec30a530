"""The embedded log's producer: records appended in one Delta commit, with Kafka's partitioner and dense offsets.

Non-null keys go where Kafka's default partitioner puts them; null keys
round-robin. The partition count is read again on every attempt, so a
producer picks up an expansion made by anyone, anywhere. A commit that lost
the race to another producer deletes its files and tries again on the new
version; one reported failed that is in the log anyway is kept. See
docs/systems/deltalog.md, "Producers, and dense offsets when there are several".
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

import pyarrow as pa
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction

from pipelines.core.partitioner import murmur2
from pipelines.errors import StreamError
from pipelines.storage.location import Location
from pipelines.systems.base import Position, Record
from pipelines.systems.deltalog.files import write_file
from pipelines.systems.deltalog.layout import FILE_SCHEMA
from pipelines.systems.deltalog.tables import COMMIT_RACE, StreamTables


class DeltaLogProducer:
    """Appends keyed records to the streams under one root."""

    def __init__(self, tables: StreamTables, max_attempts: int) -> None:
        self.tables = tables
        self.max_attempts = max_attempts
        self._round_robin: dict[str, int] = {}

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

        for _ in COMMIT_RACE.attempts(self.max_attempts):
            table, snap = self.tables.latest(stream)
            n = snap.partitions
            groups: dict[int, list[int]] = {}
            ends: dict[int, int] = {}
            placed: list[tuple[int, Position]] = []
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
                with self.tables.lock:  # the DeltaTable is this process's, shared by its threads (StreamTables)
                    table.create_write_transaction(
                        [*adds],  # its parameter is a list of adds and removes (invariant): a copy of ours
                        "append",
                        table.schema(),
                        partition_by=["partition"],
                        commit_properties=self.tables.commit_properties(snap.version, "produce"),
                    )
            except CommitFailedError:
                if self._landed(stream, [a.path for a in adds]):
                    break
                self._remove(written)
                continue
            except BaseException:
                # An interrupt (Ctrl-C, or SIGTERM in the CLI) that came during delta-rs's commit is raised at the
                # first Python step after it returns: still in here, with the commit made and its files the stream's.
                if not self._maybe_landed(stream, adds):
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
        now = datetime.now(UTC)
        ts = pa.scalar(now.replace(microsecond=now.microsecond // 1000 * 1000), pa.timestamp("us", tz="UTC"))
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
                schema=FILE_SCHEMA,
            )
            adds.append(write_file(self.tables, stream, p, data, written, data_change=True))
        return adds

    def _landed(self, stream: str, paths: list[str]) -> bool:
        """Whether a commit reported as failed is in the log anyway; its files must not be deleted then."""
        try:
            snap = self.tables.latest(stream)[1]
        except StreamError:
            return False
        return bool(paths) and all(p in snap.paths for p in paths)

    def _maybe_landed(self, stream: str, adds: list[AddAction]) -> bool:
        """Whether files given to a commit that raised may be in the log: only files known to be outside it are
        removed. When the log cannot be read either, they stay: an orphan file is harmless, a committed one
        removed is a damaged stream."""
        if not adds:
            return False  # no commit was asked for
        try:
            return self._landed(stream, [a.path for a in adds])
        except Exception:
            return True

    def _remove(self, paths: list[Location]) -> None:
        for path in paths:
            self.tables.store.delete(path)


def _encode_headers(index: int, headers: Mapping[str, str] | None) -> str | None:
    if headers is None:
        return None
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise StreamError(f"record {index}: headers must be a mapping of str to str or None, got {headers!r:.80}")
    return json.dumps(dict(headers), separators=(",", ":"), ensure_ascii=False)
