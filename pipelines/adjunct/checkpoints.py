"""The rows a store's progress adds to the job's checkpoints, and how a restart reads them back.

After the sink commits micro-batch N, the runtime appends, next to the main
input's checkpoints, one row per (store, AD partition) with the version the
batch saw (``checkpoint_rows``). They are written with the batch, never
ahead of it, so they say what the job's committed output was computed
against. At the next start ``latest_store_checkpoints`` reduces them to one
``StoreCheckpoint`` per store, which ``AdjunctStores.open`` uses where the
recovery table says "continue from last offset" for a store it creates or
re-creates (a memory store, an absent or invalid persistent one), and as the
store's latest sign of life for the validity age.

``STORE_CHECKPOINT_SCHEMA`` is the row layout; the rows live in the control
plane's ``adjunct_checkpoints`` table (append-only, partitioned by ``job``),
appended by the sink right after it writes the main input's checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipelines.adjunct.config import StoreConfig
from pipelines.adjunct.views import BatchStores
from pipelines.control.home import Home
from pipelines.systems.base import Position

STORE_CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("store", pa.string(), nullable=False),
        pa.field("system", pa.string(), nullable=False),
        pa.field("stream", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("position", pa.string(), nullable=False),  # next position to read, the system's own format
        pa.field("seq", pa.int64(), nullable=False),  # the store version (last segment) the batch saw
        pa.field("generation", pa.int64(), nullable=False),  # the bounded dataset's version served (0: unbounded)
        pa.field("incarnation", pa.string(), nullable=False),
        pa.field("batch_id", pa.int64(), nullable=False),
        pa.field("written_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


@dataclass(frozen=True)
class StoreCheckpoint:
    store: str
    system: str
    stream: str
    incarnation: str
    seq: int
    generation: int
    batch_id: int
    written_at: datetime
    positions: Mapping[int, Position] = field(default_factory=dict)


def checkpoint_rows(
    job: str, stores: Sequence[StoreConfig], batch: BatchStores, batch_id: int, now: datetime | None = None
) -> list[dict[str, Any]]:
    """The rows to append when micro-batch ``batch_id`` (which saw ``batch``) is committed."""
    now = now or datetime.now(UTC)
    rows = []
    for config in stores:
        version = batch.versions.get(config.name)
        if version is None:
            continue
        for partition, position in sorted(version.positions.items()):
            rows.append(
                {
                    "job": job,
                    "store": config.name,
                    "system": config.input.system,
                    "stream": config.input.stream,
                    "partition": partition,
                    "position": position,
                    "seq": version.seq,
                    "generation": version.generation,
                    "incarnation": version.incarnation,
                    "batch_id": batch_id,
                    "written_at": now,
                }
            )
    return rows


def latest_store_checkpoints(rows: Iterable[Mapping[str, Any]] | pa.Table) -> dict[str, StoreCheckpoint]:
    """Each store's checkpoint of its latest committed batch, from rows of one job.

    Latest by the time it was written: batch ids restart with every model
    version's query (a rescale), so they order batches of one query only.
    """
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    newest: dict[str, tuple[datetime, int]] = {}
    grouped: dict[tuple[str, datetime, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        at = (r["written_at"], r["batch_id"])
        grouped.setdefault((r["store"], *at), []).append(r)
        if r["store"] not in newest or at > newest[r["store"]]:
            newest[r["store"]] = at
    result = {}
    for store, (written_at, batch_id) in newest.items():
        group = grouped[(store, written_at, batch_id)]
        first = group[0]
        result[store] = StoreCheckpoint(
            store=store,
            system=first["system"],
            stream=first["stream"],
            incarnation=first["incarnation"],
            seq=int(first["seq"]),
            generation=int(first["generation"]),
            batch_id=int(batch_id),
            written_at=written_at,
            positions={int(r["partition"]): r["position"] for r in group},
        )
    return result


TABLE = "adjunct_checkpoints"
"""The control-plane table the store rows live in (append-only, partitioned by job)."""


def append_store_checkpoints(home: Home, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append the rows of one committed batch; appends never conflict, so concurrent jobs need no lock."""
    if not rows:
        return
    from deltalake import CommitProperties

    from pipelines.control.table import COMMIT_RETRIES
    from pipelines.deltaio import append

    path = home.control_table(TABLE)
    data = pa.Table.from_pylist(list(rows), schema=STORE_CHECKPOINT_SCHEMA)
    append(path, data, partition_by=["job"], commit_properties=CommitProperties(max_commit_retries=COMMIT_RETRIES))


def read_store_checkpoints(home: Home, job: str) -> dict[str, StoreCheckpoint]:
    """Each store's latest checkpoint for ``job`` (empty when it never committed a batch with stores)."""
    from pipelines.deltaio import is_table, read_delta

    path = home.control_table(TABLE)
    if not is_table(path):
        return {}
    return latest_store_checkpoints(read_delta(path, [("job", "=", job)], schema=STORE_CHECKPOINT_SCHEMA))
