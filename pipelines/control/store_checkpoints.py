"""The ``adjunct_checkpoints`` table: the store versions each committed micro-batch saw, one row per (store, AD
partition) (``pipelines.adjunct.checkpoints`` makes the rows and reads them back as each store's latest).

A control table like the others (append-only, partitioned by ``job``, compacted with them), kept in its own module
so that the control plane's compaction prunes it without importing the adjunct stores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.storage.home import Home

if TYPE_CHECKING:
    from deltalake import DeltaTable

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


TABLE = "adjunct_checkpoints"
"""The control-plane table the store rows live in (append-only, partitioned by job)."""


def append_store_checkpoints(home: Home, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append the rows of one committed batch; concurrent jobs need no lock, and a conflict is only with a delete."""
    if not rows:
        return
    from deltalake import CommitProperties

    from pipelines.control.table import COMMIT_RETRIES, blind_append
    from pipelines.deltaio import append

    path = home.control_table(TABLE)
    data = pa.Table.from_pylist(list(rows), schema=STORE_CHECKPOINT_SCHEMA)
    props = CommitProperties(max_commit_retries=COMMIT_RETRIES)
    # again if the compaction's delete (``prune_store_checkpoints``) lands beside it
    blind_append(lambda: append(path, data, partition_by=["job"], commit_properties=props))


def read_rows(home: Home, job: str) -> list[dict[str, Any]]:
    """Every row of ``job`` (empty when it never committed a batch with stores)."""
    from pipelines.deltaio import open_if_table, read_delta

    dt = open_if_table(home.control_table(TABLE))
    if dt is None:
        return []
    rows: list[dict[str, Any]] = read_delta(dt, [("job", "=", job)], schema=STORE_CHECKPOINT_SCHEMA).to_pylist()
    return rows


def prune_store_checkpoints(dt: DeltaTable, job: str) -> int:
    """Delete ``job``'s store rows no ``latest_store_checkpoints`` can pick again; the number of rows deleted.

    Per store and incarnation, the answer comes from one of two batches, whatever the incarnations' numbers are
    then: the one that saw the highest version (``seq``, ``generation``, then the latest written), or the latest
    written (an unnumbered incarnation is ordered by ``written_at`` alone). Rows written before both are dead;
    the predicate names only those, so a row appended while the delete runs (written later) is never matched.
    One delete commit (``control.table.delete_rows``); compaction calls it every 10 minutes of a driver's life.
    """
    from pipelines.control.table import delete_rows, sql_text
    from pipelines.deltaio import read_delta

    columns = ["store", "incarnation", "seq", "generation", "batch_id", "written_at"]
    rows = read_delta(dt, [("job", "=", job)], columns, schema=STORE_CHECKPOINT_SCHEMA).to_pylist()
    by_version: dict[tuple[str, str], tuple[int, int, datetime, int]] = {}
    by_time: dict[tuple[str, str], tuple[datetime, int]] = {}
    oldest: dict[tuple[str, str], datetime] = {}
    for r in rows:
        key = (r["store"], r["incarnation"])
        version = (int(r["seq"]), int(r["generation"]), r["written_at"], int(r["batch_id"]))
        by_version[key] = max(by_version.get(key, version), version)
        by_time[key] = max(by_time.get(key, version[2:]), version[2:])
        oldest[key] = min(oldest.get(key, r["written_at"]), r["written_at"])
    clauses = []
    for (store, incarnation), first in sorted(oldest.items()):
        kept = min(by_version[(store, incarnation)][2], by_time[(store, incarnation)][0])
        if first < kept:
            clauses.append(
                f"(store = {sql_text(store)} AND incarnation = {sql_text(incarnation)} "
                f"AND written_at < {sql_text(kept.isoformat())})"
            )
    if not clauses:
        return 0
    return delete_rows(dt, f"job = {sql_text(job)} AND ({' OR '.join(clauses)})")
