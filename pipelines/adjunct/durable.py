"""The durable truth of a store: append-only change segments and compacted snapshots, in Delta, in the home.

Layout (``<home>/adjunct/<job>/<store>/``)::

    incarnations/            Delta, append-only: one row per (re-)creation; the latest row is in force
    <incarnation>/changes/   Delta, partitioned by ``class``: one commit per ingested segment
    <incarnation>/snapshots/ Delta, partitioned by ``snapshot`` and ``class``: compacted latest values

Why segments plus compaction, not MERGE
    delta-rs does not retry a MERGE that conflicts, and a MERGE rewrites every
    file a key touches. Appends never conflict, cost one small commit per
    micro-batch (~30 ms) and keep the exact stream order of changes. Every
    segment commit carries a Delta application transaction
    ``(adjunct-writer, seq)`` and is refused unless the table's last one is
    ``seq - 1``: a second driver (a zombie) writing the same store fails
    instead of interleaving. One writer per store: the job's driver.

A segment
    Rows ``(seq, row)`` give the total stream order of changes; ``class`` is
    where a partitioned store's rows live (broadcast stores: class 0); ``hash``
    is the key's murmur3 (``pipelines.core.hashing``), kept so an executor
    loads a key-bucket fraction with a filter and never re-hashes. A null
    ``value`` deletes the key. Each segment has one meta row (class -1) whose
    value is the store's ``StoreState`` after the segment, JSON: the stream
    positions it reflects, the generation each partition delivers, the
    serving generation, the last bootstrap. Data and state commit together,
    so the positions a store claims always match its changes.

A snapshot
    ``compact`` folds the previous snapshot and the changes after it into the
    latest value per (generation, class, key), tombstones applied and older
    generations of a bounded dataset dropped, and writes it as partition
    ``snapshot=<seq>`` with a meta row. The latest two snapshots are kept, and
    the changes up to the older one are deleted, so any version from the older
    snapshot on can be rebuilt exactly (an executor that needs a version just
    behind the latest snapshot still finds it). Removed files are vacuumed
    after ``VACUUM_HOURS``.

Re-creation
    A new incarnation gets its own folder and is put in force by one append to
    ``incarnations``; the old folder is deleted afterwards. A crash at any point
    leaves either the old or the new incarnation in force, never half of one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError

from pipelines.control.home import Home
from pipelines.core.adjunct import Fraction, Generations
from pipelines.core.ssp import validate_name
from pipelines.deltaio import append, is_table, open_table, read_delta, refresh
from pipelines.errors import StoreError
from pipelines.storage.location import Location
from pipelines.systems.base import Position

FORMAT = 1
META_CLASS = -1
WRITER_APP = "adjunct-writer"
SNAPSHOT_APP = "adjunct-compactor"
INCARNATION_APP = "adjunct-incarnation"
VACUUM_HOURS = 24
KEEP_SNAPSHOTS = 2
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


class TailGone(StoreError):
    """The changes a reader asked for were folded into a snapshot and deleted; read from the snapshot."""


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Bootstrap:
    """The last bootstrap of a store: when, from where to where, how much."""

    started_at: str
    finished_at: str | None
    start: Mapping[int, Position]
    target: Mapping[int, Position]
    changes: int = 0
    seconds: float = 0.0
    kind: str = "full"
    """``full``: from the stream's beginning (forced); ``catch-up``: from the last offset to the end."""

    def to_json(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "start": {str(p): v for p, v in sorted(self.start.items())},
            "target": {str(p): v for p, v in sorted(self.target.items())},
            "changes": self.changes,
            "seconds": round(self.seconds, 3),
            "kind": self.kind,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Bootstrap | None:
        if not value:
            return None
        return cls(
            started_at=value["started_at"],
            finished_at=value.get("finished_at"),
            start={int(p): v for p, v in value.get("start", {}).items()},
            target={int(p): v for p, v in value.get("target", {}).items()},
            changes=int(value.get("changes", 0)),
            seconds=float(value.get("seconds", 0.0)),
            kind=value.get("kind", "full"),
        )


@dataclass(frozen=True)
class StoreState:
    """A store after one segment: what it reflects of its stream. Stored as the segment's meta row."""

    job: str
    store: str
    incarnation: str
    seq: int
    positions: Mapping[int, Position]
    root: int
    fingerprint: Mapping[str, str]
    persistence: str
    created_at: str
    written_at: str
    generations: Generations = field(default_factory=Generations)
    serving: int = 0
    changes: int = 0
    total_changes: int = 0
    last_bootstrap: Bootstrap | None = None
    recovery: str = ""
    origin: Mapping[int, Position] = field(default_factory=dict)
    """Where this incarnation started reading each partition (a partition added later starts at its earliest)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "job": self.job,
                "store": self.store,
                "incarnation": self.incarnation,
                "seq": self.seq,
                "positions": {str(p): v for p, v in sorted(self.positions.items())},
                "root": self.root,
                "fingerprint": dict(self.fingerprint),
                "persistence": self.persistence,
                "created_at": self.created_at,
                "written_at": self.written_at,
                "generations": self.generations.to_json(),
                "serving": self.serving,
                "changes": self.changes,
                "total_changes": self.total_changes,
                "last_bootstrap": None if self.last_bootstrap is None else self.last_bootstrap.to_json(),
                "recovery": self.recovery,
                "origin": {str(p): v for p, v in sorted(self.origin.items())},
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> StoreState:
        value = json.loads(text)
        if value.get("format") != FORMAT:
            raise StoreError(f"store state has format {value.get('format')!r}; this version reads {FORMAT}")
        return cls(
            job=value["job"],
            store=value["store"],
            incarnation=value["incarnation"],
            seq=int(value["seq"]),
            positions={int(p): v for p, v in value["positions"].items()},
            root=int(value["root"]),
            fingerprint=dict(value["fingerprint"]),
            persistence=value["persistence"],
            created_at=value["created_at"],
            written_at=value["written_at"],
            generations=Generations.from_json(value.get("generations")),
            serving=int(value.get("serving", 0)),
            changes=int(value.get("changes", 0)),
            total_changes=int(value.get("total_changes", 0)),
            last_bootstrap=Bootstrap.from_json(value.get("last_bootstrap")),
            recovery=value.get("recovery", ""),
            origin={int(p): v for p, v in value.get("origin", {}).items()},
        )

    def next(self, **changes: Any) -> StoreState:
        return replace(self, **changes)


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
            rows = rows.filter(_fraction_mask(rows["hash"], fraction))
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
            rows = rows.filter(_fraction_mask(rows["hash"], fraction))
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
        latest = _latest_per_key(both, ["class", "generation", "key"], ["value", "hash", "partition", "offset"])
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
            import logging

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
        if not is_table(path):
            return None
        dt = open_table(path)
        self._tables[key] = dt
        return dt


def _fraction_mask(hashes: pa.ChunkedArray | pa.Array, fraction: Fraction) -> pa.Array:
    values = (
        hashes.to_numpy() if isinstance(hashes, pa.Array) else hashes.combine_chunks().to_numpy(zero_copy_only=False)
    )
    return pa.array(values % fraction.factor == fraction.bucket)


def _latest_per_key(table: pa.Table, keys: list[str], values: list[str]) -> pa.Table:
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
    latest = _latest_per_key(both, ["key"], ["value", "hash"])
    return latest.filter(pc.is_valid(latest["value"])).cast(ENTRY_SCHEMA)
