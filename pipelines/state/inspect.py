"""A state as of one committed micro-batch, for the checks and the operators' views: ``current`` plus changes.

The state check compares a state with the input up to the job's committed checkpoints, so it needs the state
exactly as of the batch those checkpoints belong to, while the job may go on committing. Changes carry the
``(model_version, batch_id)`` that wrote them, and every version of ``current`` says the batch of the newest
segment it folds in (``durable.BATCH_KEY``): the newest version at or before the batch, plus the changes after
it up to the batch, is the state as of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from pipelines.core import state as rules
from pipelines.deltaio import read_delta
from pipelines.state import layout
from pipelines.state.compaction import _latest_per_key
from pipelines.state.durable import BATCH_KEY, SEGMENT_KEY, StateTables
from pipelines.storage.home import Home


class StateMovedOn(rules.StateError):
    """The state was compacted past the batch asked for and the changes before it retired: read again."""


Batch = tuple[int, int]


def state_at(home: Home, job: str, spec: rules.StateSpec, batch: Batch | None) -> pa.Table:
    """One row per key as of micro-batch ``(model_version, batch_id)`` (None: every committed change)."""
    tables = StateTables(home, job, spec)
    current = tables.current()
    version, segment = _current_version(current, batch)
    schema = layout.current_schema(spec)
    base = (
        read_delta(
            DeltaTable(current.table_uri, version=version, storage_options=home.store.delta_options()), schema=schema
        )
        if version is not None
        else schema.empty_table()
    )
    changes = read_delta(tables.changes(), schema=layout.changes_schema(spec))
    if changes.num_rows:
        changes = changes.filter(pc.greater(changes[rules.SEGMENT], segment))
        if batch is not None and changes.num_rows:
            mv, b = changes["model_version"], changes["batch_id"]
            before = pc.or_(pc.less(mv, batch[0]), pc.and_(pc.equal(mv, batch[0]), pc.less_equal(b, batch[1])))
            changes = changes.filter(before)
    if changes.num_rows:
        present = set(pc.unique(changes[rules.SEGMENT]).to_pylist())
        top = max(present)
        if len(present) != top - segment:
            raise StateMovedOn(
                f"state {spec.name!r} of job {job!r} was compacted past the batch asked for while it was read; "
                "read it again"
            )
    latest = _latest_per_key(changes, spec)
    if latest.num_rows and base.num_rows:
        base = base.filter(pc.invert(pc.is_in(base[rules.KEY], value_set=latest[rules.KEY])))
    return pa.concat_tables([base.cast(schema), latest.cast(schema)]).sort_by(rules.KEY_HASH)


def _current_version(current: DeltaTable, batch: Batch | None) -> tuple[int | None, int]:
    """(version of ``current``, segment it folds in): the newest compaction at or before ``batch``."""
    for entry in current.history():
        segment = entry.get(SEGMENT_KEY)
        if segment is None:
            continue
        at = _batch(entry.get(BATCH_KEY))
        if batch is None or at is None or at <= batch:
            return int(entry["version"]), int(segment)
    return None, 0


def _batch(text: Any) -> Batch | None:
    if not text:
        return None
    mv, _, b = str(text).partition("/")
    return int(mv), int(b)


def describe(home: Home, job: str, specs: Iterable[rules.StateSpec]) -> list[dict[str, Any]]:
    """Per state: keys, bytes in the home, the segment committed last and the one ``current`` folds in."""
    out = []
    for spec in specs:
        tables = StateTables(home, job, spec)
        rows, size = tables.size()
        current = pa.table(tables.current().get_add_actions(flatten=True))
        keys = int(pc.sum(current["num_records"]).as_py() or 0) if current.num_rows else 0
        out.append(
            {
                "state": spec.name,
                "keys_in_current": keys,
                "rows": rows,
                "bytes": size,
                "segment": tables.segment(),
                "current_as_of": tables.current_as_of(),
                "ttl_s": spec.ttl_s,
                "path": str(layout.current_path(home, job, spec.name)),
            }
        )
    return out
