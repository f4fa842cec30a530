"""A stream of the embedded log as stored: the Delta table's schema, its metadata, its file names and offsets.

A stream is a Delta table partitioned by ``partition``; offsets are dense per
partition and each data file's Delta statistics (min/max ``offset``) are
written by the producer, so readers plan from the log alone. The partition
count and expansion history are JSON in the ``partition`` column's field
metadata. Positions are decimal offset strings ("next offset to read"); this
package is the only code that turns one into an integer. See
docs/systems/deltalog.md, "Layout" and "Positions".
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

import pyarrow as pa
from deltalake import DeltaTable

from pipelines.core.limits import check_partition_count
from pipelines.core.segments import valid_retention
from pipelines.errors import ConfigError, StreamError
from pipelines.storage.location import Location, parse
from pipelines.systems.base import Expansion, Position
from pipelines.systems.offsets import parse_offset

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
FILE_SCHEMA = pa.schema([f for f in LOG_SCHEMA if f.name != "partition"])


def offset(position: Position) -> int:
    return parse_offset(SYSTEM, position)


def position_key(position: Position) -> int:
    """The order of this system's positions, without a client (offline tools, e.g. ``model migrate``)."""
    return offset(position)


def validate_count(partitions: object) -> int:
    """A stream's partition count: at most ``core.limits.MAX_PARTITIONS``, the cap every planner keeps too."""
    return check_partition_count(partitions)


def stream_meta(partitions: int, expansions: list[Expansion], retention_ms: int | None) -> dict[str, Any]:
    """The ``partition`` column's metadata; ``retention_ms`` only when the stream has its own (``stream alter``)."""
    meta: dict[str, Any] = {
        "format": META_FORMAT,
        "partitions": partitions,
        "expansions": [expansion_to_json(e) for e in expansions],
    }
    if retention_ms is not None:
        meta["retention_ms"] = retention_ms
    return meta


def meta_json(meta: dict[str, Any]) -> str:
    return json.dumps(meta, separators=(",", ":"))


def table_schema(meta: dict[str, Any]) -> pa.Schema:
    partition = LOG_SCHEMA.field("partition").with_metadata({META_KEY: meta_json(meta)})
    return LOG_SCHEMA.set(0, partition)


def expansion_to_json(expansion: Expansion) -> dict[str, Any]:
    return {
        "from_partitions": expansion.from_partitions,
        "to_partitions": expansion.to_partitions,
        "end_offsets": {str(p): o for p, o in sorted(expansion.end_offsets.items())},
        "at": expansion.at.isoformat(),
    }


class StreamMeta(NamedTuple):
    partitions: int
    expansions: list[Expansion]
    retention_ms: int | None


def read_meta(stream: str, table: DeltaTable) -> StreamMeta:
    """The partition count, the expansions and the stream's own retention, from the ``partition`` column's
    metadata (a stream made before retention was a setting has none: the default applies)."""
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
        retention = valid_retention(meta.get("retention_ms"))
    except (ValueError, KeyError, TypeError, AttributeError, ConfigError) as error:
        raise StreamError(f"stream {stream!r} has unreadable {META_KEY!r} metadata: {raw!r:.200}") from error
    return StreamMeta(partitions, expansions, retention)


def data_file(root: Location, rel: str) -> Location:
    """A data file of the table; the log may hold it percent-encoded or as an absolute URI."""
    if "://" in rel:
        parsed = urlparse(rel)
        return parse(unquote(parsed.path) if parsed.scheme == "file" else rel, what="a data file")
    return root / unquote(rel)
