"""From AD-stream records to store changes: the key/value extractor and the end-of-dataset marker.

Extractor (the proposal's KeyValueExtractor)
    ``extractor: default`` stores the record's key and value as they are. A
    user extractor is named ``package.module:function`` and takes one of the
    process function's two forms:

    * Arrow: ``fn(records: pyarrow.Table) -> pyarrow.Table`` with columns
      ``key`` and ``value`` (binary), one row per input row, in order;
    * per record (decorated with ``pipelines.jobs.process.per_record``):
      ``fn(record: Record) -> (key, value) | None``.

    ``records`` has ``RECORD_SCHEMA``'s columns. A null key skips the record
    (a keyed store cannot hold it); a null value, or an empty one, deletes the
    key (a tombstone: Kafka's log compaction treats a null value so, and the
    protocol's records carry no null values, so the embedded log writes a
    tombstone as an empty value). An extractor that raises stops the ingest
    with the record's partition and position: a reference store that
    silently skipped a change would serve a wrong value for ever after.

End-of-dataset marker (bounded datasets)
    A record whose headers hold ``{"pipelines-adjunct": "end-of-dataset"}``
    ends the current version of a bounded dataset in its partition; its key
    and value are ignored and it never reaches the extractor. The producer of
    a bounded dataset writes one marker into every partition after the
    version's last record (``end_of_dataset_record`` builds one). In an
    unbounded store a marker is ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.core.dotted import resolve_callable
from pipelines.errors import StoreError
from pipelines.jobs.process import Record, is_per_record

MARKER_HEADER = "pipelines-adjunct"
END_OF_DATASET = "end-of-dataset"

CHANGE_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.string(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("value", pa.binary()),  # null: delete the key
    ]
)
"""One change per row, in stream order within each partition."""

Extractor = Callable[..., Any]


def end_of_dataset_record(key: bytes = b"end-of-dataset") -> tuple[bytes, bytes, dict[str, str]]:
    """A marker record for ``InputSystem.produce``; choose ``key`` so it lands in the partition it must end."""
    return (key, b"", {MARKER_HEADER: END_OF_DATASET})


def load_extractor(path: str) -> Extractor:
    """Import ``package.module:function`` with an error that says what is wrong."""
    return resolve_callable(path, "extractor", "'default' or 'package.module:function'")


def marker_rows(records: pa.Table) -> list[int]:
    """Row indices of end-of-dataset markers (a substring test first, JSON only for the candidates)."""
    headers = records.column("headers")
    if headers.null_count == len(headers):
        return []
    candidates = pc.fill_null(pc.match_substring(headers, END_OF_DATASET), False)
    rows = []
    for i in pc.indices_nonzero(candidates).to_pylist():
        text = headers[i].as_py()
        try:
            parsed = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(parsed, dict) and parsed.get(MARKER_HEADER) == END_OF_DATASET:
            rows.append(i)
    return rows


def extract(records: pa.Table, extractor: Extractor | None, *, store: str, stream: str) -> pa.Table:
    """The changes ``records`` (``RECORD_SCHEMA``, no markers) make, as ``CHANGE_SCHEMA``; null keys dropped."""
    if records.num_rows == 0:
        return CHANGE_SCHEMA.empty_table()
    if extractor is None:
        keys, values = records.column("key"), records.column("value")
    elif is_per_record(extractor):
        keys, values = _per_record(records, extractor, store, stream)
    else:
        keys, values = _arrow(records, extractor, store)
    empty = pc.fill_null(pc.equal(pc.binary_length(values), 0), True)
    values = pc.if_else(empty, pa.scalar(None, pa.binary()), values)
    table = pa.Table.from_arrays(
        [records.column("partition"), records.column("offset"), keys, values],
        schema=CHANGE_SCHEMA.set(2, CHANGE_SCHEMA.field("key").with_nullable(True)),
    )
    if keys.null_count:
        table = table.filter(pc.is_valid(keys))
    return table.cast(CHANGE_SCHEMA)


def _arrow(records: pa.Table, fn: Extractor, store: str) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    try:
        out = fn(records)
    except Exception as e:
        raise StoreError(
            f"store {store!r}: extractor failed on partition {records['partition'][0]} positions "
            f"{records['offset'][0]}..{records['offset'][-1]}: {type(e).__name__}: {e}"
        ) from e
    if not isinstance(out, pa.Table) or "key" not in out.column_names or "value" not in out.column_names:
        raise StoreError(f"store {store!r}: an Arrow extractor must return a pyarrow.Table with 'key' and 'value'")
    if out.num_rows != records.num_rows:
        raise StoreError(
            f"store {store!r}: the extractor returned {out.num_rows} rows for {records.num_rows} records; "
            "return one row per record (a null key skips one)"
        )
    try:
        return out.column("key").cast(pa.binary()), out.column("value").cast(pa.binary())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise StoreError(f"store {store!r}: the extractor's key and value must be binary: {e}") from None


def _per_record(records: pa.Table, fn: Extractor, store: str, stream: str) -> tuple[pa.Array, pa.Array]:
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    columns = records.to_pydict()
    for i in range(records.num_rows):
        record = Record(
            stream=stream,
            partition=columns["partition"][i],
            offset=columns["offset"][i],
            key=columns["key"][i],
            value=columns["value"][i],
            timestamp=columns["timestamp"][i],
            headers=columns["headers"][i],
        )
        try:
            out = fn(record)
        except Exception as e:
            raise StoreError(
                f"store {store!r}: extractor failed on partition {record.partition} position {record.offset}: "
                f"{type(e).__name__}: {e}"
            ) from e
        if out is None:
            keys.append(None)
            values.append(None)
            continue
        if not (isinstance(out, tuple) and len(out) == 2):
            raise StoreError(
                f"store {store!r}: a per-record extractor returns (key, value) or None, got {type(out).__name__} "
                f"for partition {record.partition} position {record.offset}"
            )
        key, value = out
        keys.append(_as_bytes(key, store, "key"))
        values.append(None if value is None else _as_bytes(value, store, "value"))
    return pa.array(keys, pa.binary()), pa.array(values, pa.binary())


def _as_bytes(value: Any, store: str, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise StoreError(f"store {store!r}: the extractor's {what} must be bytes or str, got {type(value).__name__}")
