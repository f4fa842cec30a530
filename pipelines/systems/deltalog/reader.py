"""The embedded log's consumer: a partition's offset range, opening only the files the statistics name.

A read plans from the cached snapshot when it already covers the range, so a
consumer reading behind the end does not list the log on every call, and
checks that the files hold exactly the offsets asked for. A read in flight
waits out an outage of the stream's storage. See docs/systems/deltalog.md,
"Ends and reads" and "Outages".
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.deltaio import readable
from pipelines.errors import DamagedTableError, StreamError
from pipelines.systems.base import RECORD_SCHEMA, Bounded, End, Position, ReadResult
from pipelines.systems.deltalog.layout import FILE_SCHEMA, LOG_SCHEMA, SYSTEM, data_file, offset
from pipelines.systems.deltalog.snapshot import timed_files
from pipelines.systems.deltalog.tables import StreamTables


class DeltaLogReader:
    """Reads offset ranges of the streams under one root."""

    def __init__(self, tables: StreamTables) -> None:
        self.tables = tables

    def files_for_range(self, stream: str, partition: int, start: int, end: int) -> list[str]:
        """The data files (paths relative to the table) a read of ``[start, end)`` opens, from statistics only."""
        return self._plan(stream, partition, start, end)

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        """``[start, end)``, or with a ``Bounded`` end at most ``end.records`` records from ``start``."""
        first = offset(start)
        if isinstance(end, Bounded):
            last = min(first + max(end.records, 0), self._plan_end(stream, partition))
        else:
            last = offset(end)
        data = self.tables.waiting_for_storage(
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
        store = self.tables.store
        root = self.tables.location(stream)
        filters = [("offset", ">=", start), ("offset", "<", end)]
        wanted = None if columns is None else [c for c in FILE_SCHEMA.names if c in columns or c == "offset"]
        filesystem = store.filesystem()

        def read(paths: list[str]) -> list[pa.Table]:
            with readable(root):
                return [
                    pq.read_table(
                        store.arrow_path(data_file(root, rel)),
                        schema=FILE_SCHEMA,
                        filters=filters,
                        columns=wanted,
                        filesystem=filesystem,
                    )
                    for rel in paths
                ]

        try:
            parts = read(files)
        except DamagedTableError:
            # A snapshot this process cached may name files a trim or a compaction has since removed and deleted:
            # the latest snapshot says which, and a range still held is read again from its files.
            latest = self.tables.latest(stream)[1].partition_files(partition)
            if start < latest.earliest:
                raise trimmed(stream, partition, start, latest.earliest) from None
            now = latest.overlapping(start, end)
            if now == files:
                raise
            files = now
            parts = read(files)
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
            data.column(f.name) if f.name in data.column_names else pa.nulls(data.num_rows, f.type) for f in FILE_SCHEMA
        ]
        return pa.Table.from_arrays(
            [pa.repeat(pa.scalar(partition, pa.int32()), data.num_rows), *arrays],
            schema=LOG_SCHEMA,
        )

    def positions_at(self, stream: str, at_ms: int) -> dict[int, int]:
        """Each partition's first offset whose timestamp is at or after ``at_ms``, or its end when none is.

        Found from the files' timestamp statistics in offset order: the first
        file whose newest record is at or after the time holds the answer
        (every earlier file is wholly before it), and only a file the time falls
        inside is opened. Kafka's ``offsetsForTimes`` answers the same question
        the same way, from its time index (docs/systems/deltalog.md, "Starting at
        a time").
        """
        at_us = at_ms * 1000
        table, snap = self.tables.latest(stream)
        with self.tables.lock:  # the DeltaTable is shared by this process's threads (StreamTables)
            files = timed_files(stream, table)
        found = {p: snap.end(p) for p in range(snap.partitions)}
        answered: set[int] = set()
        for p, lo, hi, oldest, newest, *_ in files:
            if p not in found or p in answered or newest is None or newest < at_us:
                continue  # a partition added since the snapshot, already answered, or a file wholly before the time
            answered.add(p)
            if oldest is not None and oldest >= at_us:
                found[p] = lo
                continue
            data = self.read_range(stream, p, lo, hi + 1, columns=["timestamp"])
            after = pc.greater_equal(data["timestamp"], pa.scalar(at_us, pa.timestamp("us", tz="UTC")))
            found[p] = data["offset"][pc.index(after, True).as_py()].as_py()
        return found

    def _plan_end(self, stream: str, partition: int) -> int:
        snap = self.tables.latest(stream)[1]
        if partition >= snap.partitions:
            raise StreamError(f"stream {stream!r} has partitions 0..{snap.partitions - 1}, not {partition}")
        return snap.end(partition)

    def _plan(self, stream: str, partition: int, start: int, end: int) -> list[str]:
        for name, value in (("partition", partition), ("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise StreamError(f"{name} must be an integer >= 0, got {value!r}")
        if start > end:
            raise StreamError(f"start offset {start} is after end offset {end}")
        snap = self.tables.cached(stream)
        if partition >= snap.partitions or end > snap.end(partition):
            snap = self.tables.latest(stream)[1]
        if partition >= snap.partitions:
            raise StreamError(f"stream {stream!r} has partitions 0..{snap.partitions - 1}, not {partition}")
        files = snap.partition_files(partition)
        if end > files.end:
            raise StreamError(
                f"stream {stream!r} partition {partition} ends at offset {files.end}; cannot read up to {end}"
            )
        if start < files.earliest:
            raise trimmed(stream, partition, start, files.earliest)
        return files.overlapping(start, end)


def trimmed(stream: str, partition: int, start: int, earliest: int) -> StreamError:
    """A read from before a partition's earliest: retention removed those records (docs/systems/deltalog.md)."""
    return StreamError(
        f"stream {stream!r} partition {partition} no longer holds offset {start}: it starts at {earliest} "
        f"(retention, 'pipelines stream trim', removed the records before it); the records between are lost to this "
        "reader, and a job stopped by them goes on only after 'pipelines job skip-lost JOB'"
    )
