"""The driver's side of adjunct stores: open them by the recovery table, bootstrap them, ingest before each batch.

The runtime's driver holds one ``AdjunctStores`` per job run::

    stores = AdjunctStores.open(home, job, configs, systems, checkpoints=latest_store_checkpoints(rows))
    stores.bootstrap()                       # before the first main-input batch (ingest() calls it if you forget)
    while running:
        batch = stores.ingest()              # before planning each micro-batch: a BatchStores, put in the plan
        ... plan, run the tasks with task_stores(..., batch, ...), commit the sink ...
        append checkpoint_rows(job, configs, batch, batch_id)   # after the sink commit

Open (``pipelines.core.adjunct.decide_recovery``) judges each store and follows the
proposal's recovery table; bootstrap stores are read to the stream's end before the
first batch; ingest appends what each AD partition delivered as one segment with the
positions it reached, so a crash in between only re-applies keyed changes. The
rules in full: docs/design.md#the-drivers-side.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.adjunct.bases import hashes_of
from pipelines.adjunct.checkpoints import StoreCheckpoint
from pipelines.adjunct.config import StoreConfig, stream_root
from pipelines.adjunct.durable import DurableStore
from pipelines.adjunct.extract import extract, load_extractor, marker_rows
from pipelines.adjunct.rows import CHANGES_SCHEMA
from pipelines.adjunct.state import Bootstrap, StoreState
from pipelines.adjunct.views import BatchStores, StoreVersion
from pipelines.core.adjunct import (
    Action,
    Found,
    Recovery,
    Start,
    Validity,
    decide_recovery,
    judge_store,
    serving_generation,
)
from pipelines.core.groupers import check_growth
from pipelines.errors import PartitionChangeError, PipelinesError, StoreError
from pipelines.faults import crash_point
from pipelines.storage.clock import store_clock
from pipelines.storage.home import Home
from pipelines.systems.base import Bounded, InputSystem, Position, check_not_rewound

log = logging.getLogger(__name__)

COMPACT_MIN_CHANGES = 100_000
COMPACT_RATIO = 0.5
COMPACT_SEGMENTS = 500
HEARTBEAT = timedelta(hours=1)

Systems = Mapping[str, InputSystem] | Callable[[str], InputSystem]


def store_now(home: Home) -> datetime:
    """The store's time (``storage.clock``): a store's ``written_at`` and the validity age are on this clock.

    ``valid_for`` is a duration judged between hosts: the driver that last
    wrote the store and the one that opens it may run on different machines.
    Both read the home's store's clock, so a store is neither kept past its
    age nor rebuilt early because the two hosts' clocks disagree.
    """
    return store_clock(home.root).now()


@dataclass
class Opened:
    """What the open found and decided for one store (the operations pages show it)."""

    found: Found
    reason: str
    recovery: Recovery
    start: Mapping[int, Position]


@dataclass
class _Store:
    config: StoreConfig
    durable: DurableStore
    system: InputSystem
    state: StoreState
    opened: Opened
    extractor: Any
    target: dict[int, Position] | None = None
    """The stream's end at open, for a store that must be bootstrapped before the first batch."""
    snapshot_entries: int = 0
    changes_since_snapshot: int = 0
    segments_since_snapshot: int = 0
    last_write: float = field(default_factory=time.monotonic)


class AdjunctStores:
    """The stores of one job run, on its driver: the only writer of their durable state."""

    def __init__(self, home: Home, job: str, stores: dict[str, _Store]) -> None:
        self.home = home
        self.job = job
        self._stores = stores
        self._batch: BatchStores | None = None

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        home: Home,
        job: str,
        configs: Sequence[StoreConfig],
        systems: Systems,
        *,
        checkpoints: Mapping[str, StoreCheckpoint] | None = None,
        now: datetime | None = None,
    ) -> AdjunctStores:
        """Apply the recovery table to every store; nothing is read from the streams yet but their metadata."""
        now = now or store_now(home)
        get = systems if callable(systems) else systems.__getitem__
        opened = {}
        for config in configs:
            system = get(config.input.system)
            opened[config.name] = _open_store(home, job, config, system, (checkpoints or {}).get(config.name), now)
        return cls(home, job, opened)

    @property
    def configs(self) -> list[StoreConfig]:
        return [s.config for s in self._stores.values()]

    def opened(self, store: str) -> Opened:
        return self._stores[store].opened

    def state(self, store: str) -> StoreState:
        return self._stores[store].state

    # ------------------------------------------------------------------ bootstrap

    def bootstrap(self, progress: Callable[[str, int], None] | None = None) -> dict[str, Bootstrap]:
        """Fill every store that must be bootstrapped to the stream's end as of the open; idempotent."""
        done = {}
        for name, s in self._stores.items():
            if s.target is None:
                continue
            started, clock = store_now(self.home), time.monotonic()
            start = dict(s.state.positions)
            changes = 0
            while not self._reached(s, s.target):
                read = self._ingest_store(s, s.config.batch_records, until=s.target)
                if read is None:
                    raise StoreError(
                        f"store {name!r}: bootstrap cannot progress towards {s.target} from {s.state.positions}; "
                        "a partition is held back or the stream lost records"
                    )
                changes += read
                if progress is not None:
                    progress(name, changes)
            record = Bootstrap(
                started_at=started.isoformat(),
                finished_at=store_now(self.home).isoformat(),
                start=start,
                target=dict(s.target),
                changes=changes,
                seconds=time.monotonic() - clock,
                kind="full" if s.opened.recovery.start is Start.BOOTSTRAP else "catch-up",
            )
            self._write(s, s.state.next(last_bootstrap=record), None)
            self._compact(s)
            s.target = None
            done[name] = record
        return done

    def pending_bootstrap(self) -> list[str]:
        return [n for n, s in self._stores.items() if s.target is not None]

    # ------------------------------------------------------------------ ingest

    def ingest(self, max_records: int | None = None) -> BatchStores:
        """Before planning a micro-batch: read each AD stream on, append durably, name the versions it sees.

        ``max_records`` caps the records per store (default: each store's
        ``batch_records``). The result goes into the batch's plan, so that a
        replayed batch sees the same versions.
        """
        if self.pending_bootstrap():
            self.bootstrap()
        for s in self._stores.values():
            self._ingest_store(s, max_records or s.config.batch_records)
            if self._due_for_compaction(s):
                self._compact(s)
            elif time.monotonic() - s.last_write > HEARTBEAT.total_seconds():
                self._write(s, s.state, None)  # a sign of life for the validity age of a quiet stream
        self._batch = self.current()
        return self._batch

    def current(self) -> BatchStores:
        """The versions as they stand, without reading anything."""
        return BatchStores({n: _version(s) for n, s in self._stores.items()})

    def compact(self) -> None:
        """Compact every store now (operations; ``ingest`` compacts when due)."""
        for s in self._stores.values():
            self._compact(s)

    def close(self) -> None:
        for s in self._stores.values():
            if not isinstance(s.system, _Shared):
                s.system.close()

    # ------------------------------------------------------------------ internals

    def _reached(self, s: _Store, target: Mapping[int, Position]) -> bool:
        stream = s.config.input.stream
        return all(
            p in s.state.positions and s.system.reached(stream, p, s.state.positions[p], end)
            for p, end in target.items()
        )

    def _ingest_store(self, s: _Store, budget: int, until: Mapping[int, Position] | None = None) -> int | None:
        """Read at most ``budget`` records on and append them as a segment; changes stored, None if nothing moved."""
        system, stream = s.system, s.config.input.stream
        ends = system.end_positions(stream)
        floors = dict(s.state.positions)
        check_not_rewound(
            system,
            stream,
            floors,
            ends,
            reader=f"the position of store {s.config.name!r}",
            then="the store stops rather than skip the changes the partition holds now below its position",
        )
        fresh = [p for p in ends if p not in floors]
        if fresh:  # partitions added by an expansion start at their beginning
            meta = system.describe(stream)
            for p in fresh:
                floors[p] = meta.partitions[p].earliest
        stop_at = dict(until) if until is not None else ends
        limits = system.read_limits(stream, floors)
        todo = [
            p
            for p in sorted(ends)
            if limits.get(p, "") is not None and p in stop_at and not system.reached(stream, p, floors[p], stop_at[p])
        ]
        if not todo:
            if fresh:
                self._write(s, s.state.next(positions=floors), None)
            return None
        share = max(1, budget // len(todo))
        # every read stops at the target (the end now, or the bootstrap's) and at any hold-back
        caps: dict[int, Position] = {}
        for p in todo:
            bounds = [stop_at[p]]
            limit = limits.get(p)
            if limit is not None:
                bounds.append(limit)
            caps[p] = min(bounds, key=system.position_key)
        stops = system.advance(stream, {p: floors[p] for p in todo}, {p: share for p in todo}, caps)
        generations = s.state.generations
        pieces = []
        positions = dict(floors)
        for p in todo:
            result = system.read(stream, p, floors[p], stops[p] if p in stops else Bounded(floors[p], share))
            positions[p] = result.next_position
            records = result.records
            cuts = marker_rows(records)
            start = 0
            for cut in [*cuts, records.num_rows]:
                chunk = records.slice(start, cut - start)
                if chunk.num_rows:
                    pieces.append((generations.of(p), self._changes(s, chunk)))
                if cut < records.num_rows:
                    if s.config.bounded:
                        generations = generations.after_marker(p)
                    start = cut + 1
        changes = _segment(s, pieces, s.state.seq + 1)
        if changes.num_rows == 0 and positions == s.state.positions and generations == s.state.generations:
            return None
        serving = max(s.state.serving, serving_generation(s.config.dataset, generations, sorted(positions)))
        sealed = serving != s.state.serving
        state = s.state.next(
            seq=s.state.seq + 1,
            positions=positions,
            generations=generations,
            serving=serving,
            changes=changes.num_rows,
            total_changes=s.state.total_changes + changes.num_rows,
        )
        self._write(s, state, changes)
        if sealed:  # executors build the new version from one snapshot, not from its whole tail
            self._compact(s)
        return int(changes.num_rows)

    def _changes(self, s: _Store, records: pa.Table) -> pa.Table:
        return extract(records, s.extractor, store=s.config.name, stream=s.config.input.stream)

    def _write(self, s: _Store, state: StoreState, changes: pa.Table | None) -> None:
        if changes is None:
            state = state.next(seq=s.state.seq + 1, changes=0)
        state = state.next(written_at=store_now(self.home).isoformat())
        s.durable.append_segment(state, changes, expect_previous=s.state.seq)
        crash_point("store_switch")
        s.state = state
        s.last_write = time.monotonic()
        s.changes_since_snapshot += state.changes
        s.segments_since_snapshot += 1

    def _due_for_compaction(self, s: _Store) -> bool:
        return (
            s.changes_since_snapshot >= max(COMPACT_MIN_CHANGES, COMPACT_RATIO * s.snapshot_entries)
            or s.segments_since_snapshot >= COMPACT_SEGMENTS
        )

    def _compact(self, s: _Store) -> None:
        if s.segments_since_snapshot == 0 and s.snapshot_entries:
            return
        keep_from = s.state.serving if s.config.bounded else 0
        rows = s.durable.compact(s.state, keep_from)
        if rows >= 0:
            s.snapshot_entries = rows
        s.changes_since_snapshot = 0
        s.segments_since_snapshot = 0


class _Shared:
    """Marker base for systems the caller owns (never closed here)."""


def _version(s: _Store) -> StoreVersion:
    return StoreVersion(
        store=s.config.name,
        incarnation=s.state.incarnation,
        seq=s.state.seq,
        generation=s.state.serving,
        root=s.state.root,
        positions=dict(s.state.positions),
    )


def _segment(s: _Store, pieces: list[tuple[int, pa.Table]], seq: int) -> pa.Table:
    """Changes of one segment in ``CHANGES_SCHEMA``: class, hash and stream order attached."""
    if not pieces:
        return CHANGES_SCHEMA.empty_table()
    tables = []
    for generation, changes in pieces:
        if changes.num_rows:
            tables.append(
                changes.append_column("generation", pa.array(np.full(changes.num_rows, generation, np.int64)))
            )
    if not tables:
        return CHANGES_SCHEMA.empty_table()
    data = pa.concat_tables(tables)
    n = data.num_rows
    keys = data.column("key").to_pylist()
    parts = data.column("partition").to_numpy()
    classes = parts % s.state.root if s.config.partitioned else np.zeros(n, np.int32)
    return pa.Table.from_arrays(
        [
            pa.array(classes.astype(np.int32)),
            pa.array(np.full(n, seq, np.int64)),
            pa.array(np.arange(n, dtype=np.int64)),
            data.column("generation"),
            data.column("partition"),
            data.column("offset"),
            data.column("key"),
            data.column("value"),
            pa.array(hashes_of(keys).astype(np.int64)),
        ],
        schema=CHANGES_SCHEMA,
    )


def _open_store(
    home: Home, job: str, config: StoreConfig, system: InputSystem, checkpoint: StoreCheckpoint | None, now: datetime
) -> _Store:
    stream = config.input.stream
    durable = DurableStore(home, job, config.name)
    meta = system.describe(stream)
    earliest = {p: m.earliest for p, m in meta.partitions.items()}
    previous: StoreState | None = None
    validity: Validity
    try:
        previous = durable.latest()
    except (PipelinesError, OSError, ValueError, KeyError) as e:
        validity = Validity(Found.INVALID, f"unreadable ({e})")
    else:
        if previous is None:
            validity = Validity(Found.ABSENT, "no store")
        else:
            fallen = [
                p
                for p, pos in sorted(previous.positions.items())
                if p in earliest and system.position_key(pos) < system.position_key(earliest[p])
            ]
            last_update = datetime.fromisoformat(previous.written_at)
            if checkpoint is not None and checkpoint.incarnation == previous.incarnation:
                last_update = max(last_update, checkpoint.written_at)
            validity = judge_store(
                exists=True,
                last_update=last_update,
                now=now,
                max_age=config.valid_for,
                fingerprint=previous.fingerprint,
                expected_fingerprint=config.fingerprint(),
                fallen_off=fallen,
            )
    recovery = decide_recovery(config.persistence, config.bootstrap, validity.found)
    log.info("store %s of job %s: %s (%s): %s", config.name, job, validity.found.value, validity.reason, recovery)
    if recovery.action is Action.KEEP:
        assert previous is not None
        try:  # the store's parts are laid out by the count it was created with
            check_growth(f"{config.input} (since the store was created)", previous.root, meta.partition_count)
        except PartitionChangeError as e:
            raise StoreError(f"store {config.name!r}: {e}") from None
        positions = {**earliest, **previous.positions}
        state = previous.next(positions=positions, recovery=f"{validity.found.value}: {recovery}")
        start = dict(positions)
    else:
        if recovery.start is Start.BOOTSTRAP:
            start = dict(earliest)
        else:
            start = _last_offset(config, system, checkpoint, previous, earliest)
        first = StoreState(
            job=job,
            store=config.name,
            incarnation="",
            seq=0,
            positions=start,
            root=stream_root(meta),
            fingerprint=config.fingerprint(),
            persistence=config.persistence.value,
            created_at=now.isoformat(),
            written_at=now.isoformat(),
            serving=-1 if config.bounded else 0,
            recovery=f"{validity.found.value} ({validity.reason}): {recovery}",
            origin=dict(start),
        )
        reason = f"{validity.found.value} ({validity.reason}): {recovery}"
        state = durable.new_incarnation(first, reason)
    extractor = None if config.extractor == "default" else load_extractor(config.extractor)
    opened = Opened(validity.found, validity.reason, recovery, start)
    s = _Store(config=config, durable=durable, system=system, state=state, opened=opened, extractor=extractor)
    if recovery.action is Action.KEEP:
        s.durable.append_segment(
            state.next(seq=state.seq + 1, changes=0, written_at=store_now(home).isoformat()),
            None,
            expect_previous=state.seq,
        )
        s.state = state.next(seq=state.seq + 1, changes=0)
        kept = s.durable.snapshots(state.incarnation)
        s.snapshot_entries = _entries(s.durable, state.incarnation, kept)
        s.segments_since_snapshot = state.seq - (max(kept) if kept else -1)
    if config.bootstrap:
        s.target = system.end_positions(stream)
    return s


def _entries(durable: DurableStore, incarnation: str, kept: Mapping[int, StoreState]) -> int:
    if not kept:
        return 0
    from pipelines.adjunct.rows import META_CLASS, SNAPSHOT_SCHEMA
    from pipelines.deltaio import read_delta

    dt = durable._load(durable.root / incarnation / "snapshots")
    assert dt is not None  # ``kept`` was read from it
    rows = read_delta(dt, [("class", "=", META_CLASS), ("snapshot", "=", max(kept))], schema=SNAPSHOT_SCHEMA)
    return int(rows["hash"][0].as_py() or 0) if rows.num_rows else 0


def _last_offset(
    config: StoreConfig,
    system: InputSystem,
    checkpoint: StoreCheckpoint | None,
    previous: StoreState | None,
    earliest: Mapping[int, Position],
) -> dict[int, Position]:
    """Where a new incarnation continues: the job's checkpoint, else the old store's position, else the start."""
    same_stream = {"system": config.input.system, "stream": config.input.stream}
    source: Mapping[int, Position] = {}
    if checkpoint is not None and (checkpoint.system, checkpoint.stream) == (config.input.system, config.input.stream):
        source = checkpoint.positions
    elif previous is not None and all(previous.fingerprint.get(k) == v for k, v in same_stream.items()):
        source = previous.positions
    result = {}
    for p, first in earliest.items():
        pos = source.get(p)
        # a position the stream no longer holds (retention) restarts at its earliest record
        if pos is None or system.position_key(pos) < system.position_key(first):
            result[p] = first
        else:
            result[p] = pos
    return result
