"""The durable truth of a store: append-only change segments and compacted snapshots, in Delta, in the home.

One writer per store (the job's driver), readers anywhere. Segments are
appended, never MERGEd: appends never conflict, keep the stream's order, and
carry an application transaction that makes a second (zombie) writer fail.
Row layouts: ``pipelines.adjunct.rows``; the state a segment records:
``pipelines.adjunct.state``. Layout, compaction and re-creation:
docs/design.md#the-durable-store.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError

from pipelines.adjunct.rows import (
    CHANGES_SCHEMA,
    INCARNATIONS_SCHEMA,
    META_CLASS,
    SNAPSHOT_SCHEMA,
    fold,
    fraction_mask,
    latest_per_key,
)
from pipelines.adjunct.state import StoreState
from pipelines.core.adjunct import Fraction
from pipelines.core.ssp import validate_name
from pipelines.deltaio import append, open_if_table, read_delta, refresh
from pipelines.errors import StoreError
from pipelines.storage.home import Home
from pipelines.storage.location import Location

WRITER_APP = "adjunct-writer"
SNAPSHOT_APP = "adjunct-compactor"
INCARNATION_APP = "adjunct-incarnation"
VACUUM_HOURS = 24
KEEP_SNAPSHOTS = 2


class TailGone(StoreError):
    """The changes a reader asked for were folded into a snapshot and deleted; read from the snapshot."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def store_dir(home: Home, job: str, store: str) -> Location:
    return home.root / "adjunct" / validate_name("job", job) / validate_name("store", store)


class DurableStore:
    """One store's Delta tables. Writers: the job's driver only; readers: anyone (executors, operations).

    An instance caches its DeltaTable handles and refreshes them before each
    read; not for sharing between threads.
    """

    def __init__(self, home: Home, job: str, store: str) -> None:
        self.home = home
        self.job = job
        self.store = store
        self.root = store_dir(home, job, store)
        self._tables: dict[str, DeltaTable] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"home": self.home, "job": self.job, "store": self.store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["home"], state["job"], state["store"])  # type: ignore[misc]

    # ------------------------------------------------------------------ incarnations

    def incarnation(self) -> str | None:
        """The incarnation in force, or None when the store was never created."""
        dt = self._load(self.root / "incarnations")
        if dt is None:
            return None
        rows = read_delta(dt, schema=INCARNATIONS_SCHEMA)
        if rows.num_rows == 0:
            return None
        latest: str = rows.sort_by("number")["incarnation"][-1].as_py()
        return latest

    def incarnation_numbers(self) -> dict[str, int]:
        """Every incarnation the store had, with its number (1, 2, ... in the order they were made)."""
        dt = self._load(self.root / "incarnations")
        if dt is None:
            return {}
        rows = read_delta(dt, schema=INCARNATIONS_SCHEMA).to_pylist()
        return {r["incarnation"]: int(r["number"]) for r in rows}

    def new_incarnation(self, first: StoreState, reason: str) -> StoreState:
        """Create a fresh incarnation with its first (empty) segment and put it in force; old ones are deleted."""
        incarnation = uuid.uuid4().hex
        state = first.next(incarnation=incarnation, seq=0)
        self.append_segment(state, None, expect_previous=None)
        path = self.root / "incarnations"
        dt = self._load(path)
        number = 1
        if dt is not None:
            current = read_delta(dt, schema=INCARNATIONS_SCHEMA)
            number = (max(current["number"].to_pylist()) + 1) if current.num_rows else 1
        row = pa.Table.from_pylist(
            [{"number": number, "incarnation": incarnation, "reason": reason, "created_at": utc_now()}],
            schema=INCARNATIONS_SCHEMA,
        )
        try:
            append(
                dt if dt is not None else path,
                row,
                commit_properties=CommitProperties(app_transactions=[Transaction(INCARNATION_APP, number)]),
            )
        except CommitFailedError as e:
            raise StoreError(
                f"store {self.store!r} of job {self.job!r} was re-created by another process at the same time ({e}); "
                "is a second driver running this job?"
            ) from None
        self._tables.pop(str(path), None)
        store = self.home.store
        for old in store.list(self.root):
            if old.is_dir and old.name not in ("incarnations", incarnation):
                store.delete_tree(old.location)
        return state

    def _dir(self, incarnation: str) -> Location:
        return self.root / incarnation

    # ------------------------------------------------------------------ segments

    def latest(self, incarnation: str | None = None) -> StoreState | None:
        """The state after the last segment of the incarnation in force (or the one named), None if absent."""
        incarnation = incarnation or self.incarnation()
        if incarnation is None:
            return None
        dt = self._load(self._dir(incarnation) / "changes")
        if dt is None:
            raise StoreError(f"store {self.store!r}: incarnation {incarnation} has no changes table")
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
        metas = [a for a in actions if str(a.get("partition.class")) == str(META_CLASS)]
        if not metas:
            raise StoreError(f"store {self.store!r}: incarnation {incarnation} has no state rows")
        top = max(a["max.seq"] for a in metas)
        rows = read_delta(dt, [("class", "=", META_CLASS), ("seq", "=", top)], schema=CHANGES_SCHEMA)
        return StoreState.from_json(rows["value"][0].as_py())

    def append_segment(self, state: StoreState, changes: pa.Table | None, *, expect_previous: int | None) -> None:
        """Commit one segment (``CHANGES_SCHEMA`` rows without their meta row) and the state after it.

        ``expect_previous`` is the seq of the last segment this writer knows
        of (None: the table must be new); anything else means another writer.
        """
        path = self._dir(state.incarnation) / "changes"
        dt = self._load(path)
        last = dt.transaction_version(WRITER_APP) if dt is not None else None
        if last != expect_previous:
            raise StoreError(
                f"store {self.store!r} of job {self.job!r} was written by another process (its last segment is "
                f"{last}, this driver wrote {expect_previous}); only one driver may run a job"
            )
        meta = pa.Table.from_pylist(
            [
                {
                    "class": META_CLASS,
                    "seq": state.seq,
                    "row": -1,
                    "generation": -1,
                    "partition": -1,
                    "offset": "",
                    "key": None,
                    "value": state.to_json().encode(),
                    "hash": None,
                }
            ],
            schema=CHANGES_SCHEMA,
        )
        data = (
            meta if changes is None or changes.num_rows == 0 else pa.concat_tables([changes.cast(CHANGES_SCHEMA), meta])
        )
        try:
            append(
                dt if dt is not None else path,
                data,
                partition_by=["class"],
                commit_properties=CommitProperties(app_transactions=[Transaction(WRITER_APP, state.seq)]),
            )
        except CommitFailedError as e:
            raise StoreError(
                f"store {self.store!r} of job {self.job!r}: segment {state.seq} raced another writer ({e}); "
                "only one driver may run a job"
            ) from None

    def read_changes(
        self, incarnation: str, cls: int | None, after: int, upto: int, fraction: Fraction | None = None
    ) -> pa.Table:
        """Changes with ``after < seq <= upto`` (of one class, or all), in stream order, meta rows excluded.

        Raises ``TailGone`` when segments of the range were already retired
        by compaction: the reader must start from a snapshot instead.
        """
        if upto <= after:
            return CHANGES_SCHEMA.empty_table()
        dt = self._load(self._dir(incarnation) / "changes")
        if dt is None:
            raise StoreError(f"store {self.store!r}: incarnation {incarnation} has no changes table")
        where: list[tuple[str, str, Any]] = [("seq", ">", after), ("seq", "<=", upto)]
        if cls is not None:
            where.append(("class", "in", [META_CLASS, cls]))
        rows = read_delta(dt, where, schema=CHANGES_SCHEMA)
        is_meta = pc.equal(rows["class"], META_CLASS)
        segments = len(set(rows.filter(is_meta)["seq"].to_pylist()))
        if segments != upto - after:
            raise TailGone(f"store {self.store!r}: segments ({after}, {upto}] were retired; {segments} remain")
        rows = rows.filter(pc.invert(is_meta))
        if fraction is not None and fraction.factor > 1 and rows.num_rows:
            rows = rows.filter(fraction_mask(rows["hash"], fraction))
        return rows.sort_by([("seq", "ascending"), ("row", "ascending")])

    def changes_since(self, incarnation: str, after: int) -> int:
        """How many change rows segments after ``after`` hold, from the file statistics alone."""
        dt = self._load(self._dir(incarnation) / "changes")
        if dt is None:
            return 0
        total = 0
        for a in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
            if str(a.get("partition.class")) != str(META_CLASS) and (a.get("min.seq") or 0) > after:
                total += a.get("num_records") or 0
        return total

    # ------------------------------------------------------------------ snapshots

    def snapshots(self, incarnation: str) -> dict[int, StoreState]:
        """Every kept snapshot's state, by the seq it reflects."""
        dt = self._load(self._dir(incarnation) / "snapshots")
        if dt is None:
            return {}
        rows = read_delta(dt, [("class", "=", META_CLASS)], schema=SNAPSHOT_SCHEMA)
        return {
            s: StoreState.from_json(v)
            for s, v in zip(rows["snapshot"].to_pylist(), rows["value"].to_pylist(), strict=True)
        }

    def snapshot_for(self, incarnation: str, version: int) -> int:
        """The newest snapshot at or before ``version`` (-1: none, start from nothing)."""
        kept = [s for s in self.snapshots(incarnation) if s <= version]
        return max(kept) if kept else -1

    def read_snapshot(self, incarnation: str, snapshot: int, cls: int, generation: int, fraction: Fraction) -> pa.Table:
        if snapshot < 0:
            return SNAPSHOT_SCHEMA.empty_table()
        dt = self._load(self._dir(incarnation) / "snapshots")
        if dt is None:
            raise StoreError(f"store {self.store!r}: snapshot {snapshot} is missing")
        rows = read_delta(
            dt,
            [("snapshot", "=", snapshot), ("class", "=", cls), ("generation", "=", generation)],
            schema=SNAPSHOT_SCHEMA,
        )
        if fraction.factor > 1 and rows.num_rows:
            rows = rows.filter(fraction_mask(rows["hash"], fraction))
        return rows

    def entries(self, incarnation: str, version: int, cls: int, generation: int, fraction: Fraction) -> pa.Table:
        """The exact contents of one (generation, class, fraction) at ``version``: snapshot plus changes, folded."""
        snap = self.snapshot_for(incarnation, version)
        base = self.read_snapshot(incarnation, snap, cls, generation, fraction)
        tail = self.read_changes(incarnation, cls, snap, version, fraction)
        tail = tail.filter(pc.equal(tail["generation"], generation)) if tail.num_rows else tail
        return fold(base.select(["key", "value", "hash"]), tail.select(["key", "value", "hash"]))

    def compact(self, state: StoreState, keep_generations_from: int) -> int:
        """Write the snapshot at ``state.seq``; drop older snapshots and changes beyond the kept ones. Its rows."""
        incarnation = state.incarnation
        kept = self.snapshots(incarnation)
        previous = max(kept) if kept else -1
        if previous >= state.seq:
            return -1
        path = self._dir(incarnation) / "snapshots"
        old = SNAPSHOT_SCHEMA.empty_table()
        if previous >= 0:
            kept_table = self._load(path)
            assert kept_table is not None  # ``kept`` was read from it
            old = read_delta(kept_table, [("snapshot", "=", previous), ("class", ">=", 0)], schema=SNAPSHOT_SCHEMA)
        tail = self.read_changes(incarnation, None, previous, state.seq)
        columns = ["class", "generation", "key", "value", "hash", "partition", "offset"]
        order_old = pa.array(np.full(old.num_rows, -1, dtype=np.int64))
        order_new = pc.add(pc.multiply(tail["seq"], 1 << 32), tail["row"])
        both = pa.concat_tables(
            [
                old.select(columns).append_column("order", order_old),
                tail.select(columns).append_column("order", order_new.cast(pa.int64())),
            ]
        )
        both = both.filter(pc.greater_equal(both["generation"], keep_generations_from))
        latest = latest_per_key(both, ["class", "generation", "key"], ["value", "hash", "partition", "offset"])
        latest = latest.filter(pc.is_valid(latest["value"]))
        snapshot = pa.Table.from_arrays(
            [
                pa.array(np.full(latest.num_rows, state.seq, dtype=np.int64)),
                latest["class"],
                latest["generation"],
                latest["key"],
                latest["value"],
                latest["hash"],
                latest["partition"],
                latest["offset"],
            ],
            schema=SNAPSHOT_SCHEMA,
        )
        meta = pa.Table.from_pylist(
            [
                {
                    "snapshot": state.seq,
                    "class": META_CLASS,
                    "generation": -1,
                    "key": None,
                    "value": state.to_json().encode(),
                    "hash": latest.num_rows,
                    "partition": -1,
                    "offset": "",
                }
            ],
            schema=SNAPSHOT_SCHEMA,
        )
        dt = self._load(path)
        append(
            dt if dt is not None else path,
            pa.concat_tables([snapshot, meta]),
            partition_by=["snapshot", "class"],
            commit_properties=CommitProperties(app_transactions=[Transaction(SNAPSHOT_APP, state.seq)]),
        )
        self._retire(incarnation, sorted([*kept, state.seq]))
        written: int = latest.num_rows
        return written

    def _retire(self, incarnation: str, snapshots: Sequence[int]) -> None:
        """Keep the newest ``KEEP_SNAPSHOTS`` snapshots and the changes after the oldest kept one."""
        if len(snapshots) <= KEEP_SNAPSHOTS:
            return
        oldest_kept = snapshots[-KEEP_SNAPSHOTS]
        snaps = self._load(self._dir(incarnation) / "snapshots")
        changes = self._load(self._dir(incarnation) / "changes")
        try:
            if snaps is not None:
                snaps.delete(f"snapshot < {oldest_kept}")
            if changes is not None:
                changes.delete(f"seq <= {oldest_kept}")
            for dt in (snaps, changes):
                if dt is not None:
                    dt.vacuum(retention_hours=VACUUM_HOURS, dry_run=False, enforce_retention_duration=False)
        except DeltaError as e:  # retention is housekeeping: a failure costs disk, never correctness
            logging.getLogger(__name__).warning("store %s: could not retire old segments: %s", self.store, e)

    # ------------------------------------------------------------------ disk

    def size_bytes(self, incarnation: str) -> int:
        """Bytes of the incarnation's live data files (what its Delta tables reference)."""
        total = 0
        for name in ("changes", "snapshots"):
            dt = self._load(self._dir(incarnation) / name)
            if dt is not None:
                total += sum(int(a["size_bytes"]) for a in pa.table(dt.get_add_actions(flatten=True)).to_pylist())
        return total

    def _load(self, path: Location) -> DeltaTable | None:
        key = str(path)
        dt = self._tables.get(key)
        if dt is not None:
            refresh(dt)
            return dt
        dt = open_if_table(path)
        if dt is not None:
            self._tables[key] = dt
        return dt
