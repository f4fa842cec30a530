"""The executor-side engine: the bases and overlays of every store a process serves, at exact versions.

A lookup goes to a memory-mapped base (``pipelines.adjunct.bases``) and a
small per-process overlay of the changes after the base's version, read from
the store's Delta changes; an overlay that grows past ``REBASE_MIN`` entries
and ``REBASE_RATIO`` of its base is folded into a new base. A view pins one
base and one overlay, so a reader never sees a switch halfway. Why this engine
and not LMDB or RocksDB: docs/decisions/0012-adjunct-store-engine.md; how
processes, fractions and places share bases: docs/design.md#the-executor-side-engine.
"""

from __future__ import annotations

import enum
import errno
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.adjunct.bases import FILE_OVERHEAD, Base, BaseId, hashes_of
from pipelines.adjunct.durable import DurableStore, TailGone
from pipelines.adjunct.places import files, flock, free_bytes, home_digest, prune, remove_stale
from pipelines.adjunct.rows import fold
from pipelines.core.adjunct import Fraction
from pipelines.core.cachespace import Place, choose_place
from pipelines.errors import StoreError
from pipelines.storage.home import Home

log = logging.getLogger(__name__)

REBASE_MIN = 50_000
REBASE_RATIO = 0.25


class _Missing(enum.Enum):
    """The sentinel of a key the overlay does not hold (an enum member, so ``is not _MISSING`` narrows its type)."""

    MISSING = enum.auto()


_MISSING: Final = _Missing.MISSING


@dataclass(frozen=True)
class Overlay:
    """Changes after a base's version, latest per key (None: deleted); immutable, replaced as a whole."""

    seq: int
    entries: dict[bytes, bytes | None] = field(default_factory=dict)
    hashes: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint32))

    def advanced(self, changes: pa.Table, seq: int) -> Overlay:
        if changes.num_rows == 0:
            return Overlay(seq, self.entries, self.hashes)
        entries = dict(self.entries)
        entries.update(zip(changes.column("key").to_pylist(), changes.column("value").to_pylist(), strict=True))
        new_hashes = changes.column("hash").to_numpy().astype(np.uint32)
        return Overlay(seq, entries, np.unique(np.concatenate([self.hashes, new_hashes])))


@dataclass(frozen=True)
class Part:
    """What one class of a view serves: a base and the overlay that brings it to the view's version."""

    base: Base
    overlay: Overlay

    def lookup(self, keys: pa.Array, key_list: list[bytes], hashes: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        """(found mask, values with nulls where not found) for the query keys."""
        found, idx = self.base.lookup(keys, hashes)
        if len(self.base):
            values = self.base.values.take(pa.array(idx, mask=~found))
        else:
            values = pa.nulls(len(key_list), pa.binary())
        if self.overlay.entries:
            maybe = np.nonzero(np.isin(hashes, self.overlay.hashes))[0]
            if len(maybe):
                entries = self.overlay.entries
                patch: dict[int, bytes | None] = {}
                for i in maybe:
                    v = entries.get(key_list[i], _MISSING)
                    if v is not _MISSING:
                        patch[int(i)] = v
                if patch:
                    values = _patch(values, patch)
                    for row, v in patch.items():
                        found[row] = v is not None
        return found, values


def _patch(values: pa.Array, patch: dict[int, bytes | None]) -> pa.Array:
    out = values.to_pylist()
    for i, v in patch.items():
        out[i] = v
    return pa.array(out, values.type)


# ------------------------------------------------------------------------------------------------------ engine


@dataclass(frozen=True)
class _Class:
    """One (generation, class) of a store as this process serves it: its Delta tables and its folders on this host."""

    durable: DurableStore
    directories: tuple[Path, ...]
    incarnation: str
    generation: int
    cls: int


class LocalEngine:
    """This process's bases and overlays of every store it serves, under one local root (and its fallbacks).

    One per process and places (``engine_for``); Spark reuses Python workers
    across batches, so a worker keeps its mapped bases and advances its
    overlays instead of rebuilding. A base goes to the first of ``root`` and
    ``fallbacks`` with room for it (``pipelines.core.cachespace``); lock files
    live in the last place, the one every process of the host can write.
    """

    def __init__(self, root: Path, fallbacks: Sequence[Path] = ()) -> None:
        self.root = Path(root)
        self.roots: tuple[Path, ...] = (self.root, *(Path(f) for f in fallbacks))
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, str, int, int], list[Part]] = {}
        self._durables: dict[tuple[str, str, str], DurableStore] = {}
        self._cleaned: set[tuple[str, str, str, str]] = set()
        self.builds = 0
        """Bases this process built (from the snapshot, or by folding an overlay): tests and figures read it."""
        self.reads = 0
        """Tails this process read from Delta."""

    def durable(self, home: Home, job: str, store: str) -> DurableStore:
        key = (str(home.root), job, store)
        if key not in self._durables:
            self._durables[key] = DurableStore(home, job, store)
        return self._durables[key]

    def directory(self, home: Home, job: str, store: str, incarnation: str) -> Path:
        """The store's folder in the preferred place."""
        return self.directories(home, job, store, incarnation)[0]

    def directories(self, home: Home, job: str, store: str, incarnation: str) -> tuple[Path, ...]:
        """The store's folder in every place, preferred first."""
        return tuple(root / home_digest(home) / job / store / incarnation for root in self.roots)

    def part(
        self,
        home: Home,
        job: str,
        store: str,
        incarnation: str,
        generation: int,
        cls: int,
        fraction: Fraction,
        version: int,
    ) -> Part:
        """The (generation, class) of a store at exactly ``version``, serving at least ``fraction``."""
        with self._lock:
            directories = self.directories(home, job, store, incarnation)
            at = _Class(self.durable(home, job, store), directories, incarnation, generation, cls)
            self._clean_once(directories, generation)
            key = (str(directories[0]), store, generation, cls)
            cached = self._parts.get(key, [])
            for i, part in enumerate(cached):
                if part.base.ident.fraction.covers(fraction) and part.overlay.seq <= version:
                    part = self._advance(at, part, version)
                    cached[i] = part
                    return part
            part = self._from_disk_or_build(at, fraction, version)
            self._parts[key] = [
                p for p in cached if p.overlay.seq <= version and p.base.ident.fraction != part.base.ident.fraction
            ]
            self._parts[key].append(part)
            return part

    def _advance(self, at: _Class, part: Part, version: int) -> Part:
        if part.overlay.seq == version:
            return part
        fraction = part.base.ident.fraction
        try:
            tail = at.durable.read_changes(at.incarnation, at.cls, part.overlay.seq, version, fraction)
        except TailGone:  # this base is older than what the store keeps: start from the snapshot instead
            return Part(self._build_at(at, fraction, version, use_disk=False), Overlay(version))
        self.reads += 1
        if tail.num_rows:
            tail = tail.filter(pc.equal(tail["generation"], at.generation))
        part = Part(part.base, part.overlay.advanced(tail, version))
        if len(part.overlay.entries) > max(REBASE_MIN, REBASE_RATIO * len(part.base)):
            part = self._rebase(at, part, version)
        return part

    def _rebase(self, at: _Class, part: Part, version: int) -> Part:
        """Fold the overlay into a new base at ``version`` (or map one another process already wrote)."""
        ident = BaseId(at.generation, at.cls, part.base.ident.fraction, version)
        with flock(at.directories, ident):
            base = self._newest_on_disk(at, ident.fraction, version, exact=True)
            if base is None:
                keys = list(part.overlay.entries)
                tail = pa.table(
                    {
                        "key": pa.array(keys, pa.binary()),
                        "value": pa.array(list(part.overlay.entries.values()), pa.binary()),
                        "hash": pa.array(hashes_of(keys).astype(np.int64)),
                    }
                )
                current = pa.table(
                    {
                        "key": part.base.keys.cast(pa.binary()),
                        "value": part.base.values.cast(pa.binary()),
                        "hash": pa.array(part.base.hashes.astype(np.int64)),
                    }
                )
                base = self._publish(at.durable.store, at.directories, ident, fold(current, tail))
        return Part(base, Overlay(version))

    def _from_disk_or_build(self, at: _Class, fraction: Fraction, version: int) -> Part:
        base = self._build_at(at, fraction, version, use_disk=True)
        return self._advance(at, Part(base, Overlay(base.ident.seq)), version)

    def _build_at(self, at: _Class, fraction: Fraction, version: int, *, use_disk: bool) -> Base:
        """A base at or before ``version`` from this host's disk, or one built at exactly ``version`` from Delta."""
        if use_disk:
            base = self._newest_on_disk(at, fraction, version)
            if base is not None:
                return base
        ident = BaseId(at.generation, at.cls, fraction, version)
        with flock(at.directories, ident):  # one process builds, the others wait and map its file
            base = self._newest_on_disk(at, fraction, version, exact=not use_disk)
            if base is None:
                entries = at.durable.entries(at.incarnation, version, at.cls, at.generation, fraction)
                base = self._publish(at.durable.store, at.directories, ident, entries)
        return base

    def _publish(self, store: str, directories: tuple[Path, ...], ident: BaseId, entries: pa.Table) -> Base:
        """Write a base to the first place with room for it (a place that runs out meanwhile counts as full)."""
        base = Base(ident, Base.build(ident, entries))
        need = base.nbytes + FILE_OVERHEAD
        full: set[int] = set()
        while True:
            places = [
                Place(str(r), 0 if i in full else free_bytes(d))
                for i, (r, d) in enumerate(zip(self.roots, directories, strict=True))
            ]
            chosen = places.index(choose_place(store, need, places, ident.seq))
            if chosen:
                log.warning(
                    "adjunct store %s: its %d-byte copy (g%d-c%d at version %d) goes to %s, as %s lacks room for it",
                    store, need, ident.generation, ident.cls, ident.seq, self.roots[chosen], self.roots[0],
                )  # fmt: skip
            try:
                path = base.write(directories[chosen])
                break
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                full.add(chosen)
        self.builds += 1
        mapped = Base.open(path)
        if mapped is None:
            raise StoreError(f"a local base written just now could not be read back: {path}")
        prune(directories, ident)
        return mapped

    def _newest_on_disk(self, at: _Class, fraction: Fraction, version: int, exact: bool = False) -> Base | None:
        found = [
            (ident.seq, p)
            for p in files(at.directories)
            if (ident := BaseId.parse(p.name)) is not None
            and ident.generation == at.generation
            and ident.cls == at.cls
            and ident.fraction.covers(fraction)
            and (ident.seq == version if exact else ident.seq <= version)
        ]
        for _, path in sorted(found, reverse=True):
            base = Base.open(path)
            if base is not None:
                return base
        return None

    def _clean_once(self, directories: tuple[Path, ...], generation: int) -> None:
        """Remove other incarnations of the store and older generations (``places.remove_stale``), once per process."""
        first = directories[0]
        key = (str(first.parent), first.name, str(generation), "")
        if key in self._cleaned:
            return
        self._cleaned.add(key)
        remove_stale(directories, generation)
        for k in [k for k in self._parts if k[0] == str(first) and k[2] < generation]:
            del self._parts[k]

    def forget(self) -> None:
        """Drop this process's mapped bases and overlays (tests: a fresh process; memory: release maps)."""
        with self._lock:
            self._parts.clear()
            self._cleaned.clear()


_ENGINES: dict[tuple[Path, ...], LocalEngine] = {}
_ENGINES_LOCK = threading.Lock()


def engine_for(root: Path, fallbacks: Sequence[Path] = ()) -> LocalEngine:
    """The process's engine for a local root and its fallbacks (one per process and places)."""
    key = (Path(root), *(Path(f) for f in fallbacks))
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = LocalEngine(key[0], key[1:])
        return engine
