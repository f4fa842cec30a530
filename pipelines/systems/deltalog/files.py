"""One data file of a stream: written by the module itself with its Delta statistics, named by its first offset.

Shared by the producer (one file per partition a commit touches) and by
compaction (one file for a run of small ones). The statistics (min/max
``offset`` and ``timestamp``, null counts) are what every reader plans from
(``snapshot``), so they are computed from the rows written, never assumed.
See docs/systems/deltalog.md, "Layout".
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from pipelines.storage.location import Location
from pipelines.systems.deltalog.layout import FILE_SCHEMA
from pipelines.systems.deltalog.tables import StreamTables


def write_file(
    tables: StreamTables, stream: str, partition: int, data: pa.Table, written: list[Location], *, data_change: bool
) -> AddAction:
    """Write ``data`` (``FILE_SCHEMA``, in offset order) as a new file of ``partition``; its add action.

    The file's location is appended to ``written`` before the write, so a caller that fails later can delete it.
    """
    store = tables.store
    first = int(data["offset"][0].as_py())
    rel = f"partition={partition}/{first:020d}-{uuid.uuid4().hex}.parquet"
    target = tables.location(stream) / rel
    store.makedirs(target.parent)
    written.append(target)
    with store.filesystem().open_output_stream(store.arrow_path(target)) as out:
        pq.write_table(data, out)
        size = out.tell()
    times = pc.min_max(data["timestamp"])
    stats = {
        "numRecords": data.num_rows,
        "minValues": {"offset": first, "timestamp": _stamp(times["min"].as_py())},
        "maxValues": {"offset": int(data["offset"][-1].as_py()), "timestamp": _stamp(times["max"].as_py())},
        "nullCount": {name: data[name].null_count for name in FILE_SCHEMA.names},
    }
    return AddAction(
        path=rel,
        size=size,
        partition_values={"partition": str(partition)},
        modification_time=int(time.time() * 1000),
        data_change=data_change,
        stats=json.dumps(stats, separators=(",", ":")),
    )


def _stamp(when: datetime) -> str:
    # Delta's statistics format for a timestamp, to the millisecond the layout keeps
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
