"""The row layouts of a store's Delta tables, and folding changes into latest values.

Shared by the driver that writes them (``pipelines.adjunct.durable``,
``pipelines.adjunct.ingest``) and the executors that read them
(``pipelines.adjunct.local``), so both sides agree on one definition. A
``hash`` column keeps each key's murmur3 so a key-bucket fraction is a filter,
never a re-hash; a null ``value`` deletes the key; rows of ``class``
``META_CLASS`` carry a ``StoreState`` as JSON.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.core.adjunct import Fraction
from pipelines.core.hashing import in_fraction

META_CLASS = -1
TIMESTAMP = pa.timestamp("us", tz="UTC")

CHANGES_SCHEMA = pa.schema(
    [
        pa.field("class", pa.int32(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("row", pa.int64(), nullable=False),
        pa.field("generation", pa.int64(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.string(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("hash", pa.int64()),
    ]
)
SNAPSHOT_SCHEMA = pa.schema(
    [
        pa.field("snapshot", pa.int64(), nullable=False),
        pa.field("class", pa.int32(), nullable=False),
        pa.field("generation", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("hash", pa.int64()),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.string(), nullable=False),
    ]
)
INCARNATIONS_SCHEMA = pa.schema(
    [
        pa.field("number", pa.int64(), nullable=False),
        pa.field("incarnation", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("created_at", TIMESTAMP, nullable=False),
    ]
)
ENTRY_SCHEMA = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("hash", pa.int64())])
"""What an executor loads: one (generation, class, fraction) of a store at one version."""


def fraction_mask(hashes: pa.ChunkedArray | pa.Array, fraction: Fraction) -> pa.Array:
    """Which rows hold keys of ``fraction``, as a mask for ``filter``."""
    return pa.array(fraction_of(hashes, fraction))


def fraction_of(hashes: pa.ChunkedArray | pa.Array, fraction: Fraction) -> Any:
    """``core.hashing.in_fraction`` of an Arrow column of hashes."""
    values = (
        hashes.to_numpy() if isinstance(hashes, pa.Array) else hashes.combine_chunks().to_numpy(zero_copy_only=False)
    )
    return in_fraction(values, fraction.bucket, fraction.factor)


def latest_per_key(table: pa.Table, keys: list[str], values: list[str]) -> pa.Table:
    """The last row of each key by ``order`` (nulls kept: a null value is a tombstone)."""
    if table.num_rows == 0:
        return table.select(keys + values)
    ordered = table.sort_by("order")
    keep_nulls = pc.ScalarAggregateOptions(skip_nulls=False)
    grouped = ordered.group_by(keys, use_threads=False).aggregate([(v, "last", keep_nulls) for v in values])
    return grouped.rename_columns(keys + values).select(keys + values)


def fold(base: pa.Table, tail: pa.Table) -> pa.Table:
    """``base`` (latest values, ``ENTRY_SCHEMA``) with ``tail`` (changes in order) applied; tombstones removed."""
    if tail.num_rows == 0:
        return base.cast(ENTRY_SCHEMA)
    both = pa.concat_tables(
        [
            base.cast(ENTRY_SCHEMA).append_column("order", pa.array(np.arange(-base.num_rows, 0, dtype=np.int64))),
            tail.cast(ENTRY_SCHEMA).append_column("order", pa.array(np.arange(tail.num_rows, dtype=np.int64))),
        ]
    )
    latest = latest_per_key(both, ["key"], ["value", "hash"])
    return latest.filter(pc.is_valid(latest["value"])).cast(ENTRY_SCHEMA)
