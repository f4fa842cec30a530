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

The rows live in the control plane's ``adjunct_checkpoints`` table
(``pipelines.control.store_checkpoints``: append-only, partitioned by ``job``),
appended by the sink right after it writes the main input's checkpoints.

Which rows are the latest is decided by the store's own version, not by a
clock: batch ids restart with every model version's query, and the drivers
that wrote the rows may have run on hosts whose clocks disagree. A store only
moves forward, and every batch sees the version current when it was planned,
so the latest committed batch saw the highest version: the highest
incarnation number (the store's ``incarnations`` table numbers them under an
app transaction), then the highest segment ``seq``, then ``generation``. Rows of
one version hold the same positions; ``written_at`` (the store's time) says
when the last of them was written, the store's latest sign of life.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.adjunct.config import StoreConfig
from pipelines.adjunct.views import BatchStores
from pipelines.control.store_checkpoints import read_rows
from pipelines.storage.home import Home
from pipelines.systems.base import Position

if TYPE_CHECKING:
    pass


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


Incarnations = Mapping[str, Mapping[str, int]]
"""Per store, each incarnation's number (``DurableStore.incarnation_numbers``)."""


def latest_store_checkpoints(
    rows: Iterable[Mapping[str, Any]] | pa.Table, incarnations: Incarnations | None = None
) -> dict[str, StoreCheckpoint]:
    """Each store's checkpoint of its latest committed batch, from rows of one job.

    Latest by the store version the batch saw (see the module docstring):
    ``(incarnation number, seq, generation)``. An incarnation missing from
    ``incarnations`` (its store was deleted and made anew) is older than every
    numbered one; rows of such incarnations are told apart by ``written_at``,
    the store's time, which one driver after another wrote, a restart apart.
    """
    if isinstance(rows, pa.Table):
        rows = rows.to_pylist()
    numbers = incarnations or {}

    def version(r: Mapping[str, Any]) -> tuple[int, int, int, str]:
        number = numbers.get(r["store"], {}).get(r["incarnation"], 0)
        if number == 0:
            return (0, 0, 0, "")  # unnumbered: only written_at tells them apart (below)
        return (number, int(r["seq"]), int(r["generation"]), r["incarnation"])

    newest: dict[str, tuple[tuple[int, int, int, str], datetime, str]] = {}
    for r in rows:
        key = (version(r), r["written_at"], r["incarnation"])
        if r["store"] not in newest or key > newest[r["store"]]:
            newest[r["store"]] = key
    result = {}
    for store, (top, _, incarnation) in newest.items():
        group = [r for r in rows if r["store"] == store and version(r) == top and r["incarnation"] == incarnation]
        last = max(group, key=lambda r: (r["written_at"], r["batch_id"]))
        batch = [r for r in group if r["batch_id"] == last["batch_id"] and r["written_at"] == last["written_at"]]
        result[store] = StoreCheckpoint(
            store=store,
            system=last["system"],
            stream=last["stream"],
            incarnation=incarnation,
            seq=int(last["seq"]),
            generation=int(last["generation"]),
            batch_id=int(last["batch_id"]),
            written_at=last["written_at"],
            positions={int(r["partition"]): r["position"] for r in batch},
        )
    return result


def read_store_checkpoints(home: Home, job: str) -> dict[str, StoreCheckpoint]:
    """Each store's latest checkpoint for ``job`` (empty when it never committed a batch with stores)."""
    from pipelines.adjunct.durable import DurableStore

    rows = read_rows(home, job)
    stores = sorted({r["store"] for r in rows})
    numbers = {store: DurableStore(home, job, store).incarnation_numbers() for store in stores}
    return latest_store_checkpoints(rows, numbers)
