"""The executor-side engine: immutable, memory-mapped hash indexes built from the durable snapshot, plus a tail.

A *base* is one (generation, class, fraction) of a store at one version,
written once as an Arrow IPC file sorted by the keys' murmur3 hash::

    <local root>/<home digest>/<job>/<store>/<incarnation>/g<gen>-c<class>-f<b>of<X>-s<seq>.arrow

and opened with ``mmap``. A lookup hashes the query keys, finds them with
``numpy.searchsorted`` over the hash column, and confirms them with one
vectorized key comparison; values come back as an Arrow array by ``take``.
Changes after the base's version (the *tail*, read from the store's Delta
changes) live in a small per-process overlay. When the overlay grows past
``REBASE_MIN`` entries and ``REBASE_RATIO`` of the base, a new base is
written at the current version.

Why this engine and not LMDB or RocksDB (figures: ``benchmarks/bench_adjunct.py``)
    * Speed. A batch of keys is answered by a handful of vectorized calls
      (2.1 M keys/s through ``get_many`` on 1 M entries, ``bench_adjunct``);
      LMDB (py-lmdb 3.0) answers one ``get`` per key from Python: 0.20 M
      random keys/s on 1 M entries on the same loaded machine (a throwaway
      script, not kept), and rocksdict (not installed here) was measured at
      0.29 M keys/s in an earlier attempt: both under the 1 M keys/s goal.
    * Sharing. Spark runs several Python workers per executor; the mmapped file
      is shared through the page cache by all of them (one copy per host), the
      way LMDB is and RocksDB (one writer process, no shared cache) is not.
    * Crash safety without a write-ahead log. A base is written to a temporary
      file, fsynced and renamed into place, and never changed afterwards, so a
      crash leaves either no file or a whole one (a torn file fails Arrow's
      footer check and is rebuilt). The overlay is rebuilt from Delta after a
      crash. Nothing local is ever the truth.
    * Exact versions for free. A view pins one base and one overlay; newer
      versions are new objects, so a reader never sees a switch halfway.

Several processes, one host
    Builds of one (incarnation, generation, class) take an ``flock`` on a
    lock file, so one process builds and the others wait and map its file. A
    file names its version; a process uses the newest base at or before the
    version its batch names, and builds one at exactly that version when there
    is none (e.g. a version older than every local base: never served ahead).

Partitioned stores
    A task owning bucket b of factor X of class c needs fraction (b, X). A
    base whose fraction covers it (after a split, the parent's) is used as it
    is: the bucket filter is applied to the query keys' hashes, so a rescale
    needs no new base; a merge or a new host loads only the missing fraction
    from the snapshot, filtered by the hash kept with each entry.

Persistence and place
    ``persistent`` bases live on the host's disk: ``PIPELINES_ADJUNCT_DIR``
    if set, else ``$PIPELINES_LOCAL_DIR/adjunct`` (the host's own folder,
    ``pipelines.storage.hostlocal``), else the temporary directory's
    ``pipelines-adjunct-<uid>``; a restarted worker or executor on the same
    host maps them again. ``memory`` bases prefer ``/dev/shm`` (RAM, shared by
    the host's processes, gone at reboot) and fall back to the disk folder's
    ``memory`` sub-folder when ``/dev/shm`` lacks room for the base plus a
    margin (a container's default 64 MiB holds about a million entries):
    ``pipelines.core.cachespace`` chooses, per base, from the measured free
    space, and refuses with one message naming the store, its size and every
    place's free space when none has room. Readers look in every place, so the
    processes of a host find a base wherever the first of them put it.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import hashlib
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.adjunct.durable import DurableStore, TailGone, fold
from pipelines.control.home import Home
from pipelines.core.adjunct import WHOLE, Fraction
from pipelines.core.cachespace import Place, choose_place
from pipelines.errors import StoreError
from pipelines.storage.hostlocal import LOCAL_DIR_ENV as HOST_DIR_ENV

log = logging.getLogger(__name__)

LOCAL_DIR_ENV = "PIPELINES_ADJUNCT_DIR"
REBASE_MIN = 50_000
REBASE_RATIO = 0.25
KEEP_BASES = 2
FILE_FORMAT = "1"
_NAME = re.compile(r"^g(-?\d+)-c(\d+)-f(\d+)of(\d+)-s(\d+)\.arrow$")


class _Missing(enum.Enum):
    """The sentinel of a key the overlay does not hold (an enum member, so ``is not _MISSING`` narrows its type)."""

    MISSING = enum.auto()


_MISSING: Final = _Missing.MISSING


SHM = Path("/dev/shm")
FILE_OVERHEAD = 64 * 1024
"""Bytes a base's file takes beyond its table's buffers (schema, footer, alignment), at most."""


def default_local_places(persistence: str) -> tuple[Path, ...]:
    """Where this host keeps bases of a store, in order of preference (the module's "Persistence and place")."""
    sub = "memory" if persistence == "memory" else "persistent"
    configured = os.environ.get(LOCAL_DIR_ENV)
    if configured:
        return (Path(configured) / sub,)
    host = os.environ.get(HOST_DIR_ENV)
    disk = Path(host) / "adjunct" if host else Path(tempfile.gettempdir()) / f"pipelines-adjunct-{os.getuid()}"
    if persistence == "memory" and SHM.is_dir() and os.access(SHM, os.W_OK):
        return (SHM / f"pipelines-adjunct-{os.getuid()}", disk / sub)
    return (disk / sub,)


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s file system (its nearest existing ancestor's);
    None when that folder is not writable."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return None
    stat = os.statvfs(existing)
    return stat.f_bavail * stat.f_frsize


def home_digest(home: Home) -> str:
    return hashlib.sha1(str(home.root).encode()).hexdigest()[:12]


def hashes_of(keys: Sequence[bytes]) -> np.ndarray:
    """murmur3_x86_32 (seed 0, unsigned) of each key: the key-bucket hash (``pipelines.core.hashing``)."""
    h = mmh3.hash
    return np.fromiter((h(k, 0, signed=False) for k in keys), dtype=np.uint32, count=len(keys))


# ------------------------------------------------------------------------------------------------------ bases


@dataclass(frozen=True)
class BaseId:
    generation: int
    cls: int
    fraction: Fraction
    seq: int

    @property
    def file_name(self) -> str:
        f = self.fraction
        return f"g{self.generation}-c{self.cls}-f{f.bucket}of{f.factor}-s{self.seq}.arrow"

    @classmethod
    def parse(cls, name: str) -> BaseId | None:
        m = _NAME.match(name)
        if not m:
            return None
        g, c, b, x, s = (int(v) for v in m.groups())
        return cls(g, c, Fraction(b, x), s)


class Base:
    """One immutable index: hashes (sorted), keys and values, mapped from its file (or held in memory)."""

    def __init__(self, ident: BaseId, table: pa.Table, path: Path | None = None) -> None:
        self.ident = ident
        self.path = path
        self.table = table
        self.hashes: np.ndarray = table.column("hash").chunk(0).to_numpy() if table.num_rows else np.empty(0, np.uint32)
        self.keys = table.column("key").chunk(0) if table.num_rows else pa.array([], pa.binary())
        self.values = table.column("value").chunk(0) if table.num_rows else pa.array([], pa.binary())

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    @classmethod
    def build(cls, ident: BaseId, entries: pa.Table) -> pa.Table:
        """Sort ``ENTRY_SCHEMA`` rows by hash into the index layout (one chunk each column)."""
        hashes = entries.column("hash").combine_chunks().to_numpy(zero_copy_only=False).astype(np.uint32)
        order = np.argsort(hashes, kind="stable")
        keys = entries.column("key").combine_chunks().take(pa.array(order))
        values = entries.column("value").combine_chunks().take(pa.array(order))
        large = values.nbytes >= (1 << 31) - 1 or keys.nbytes >= (1 << 31) - 1
        kt = pa.large_binary() if large else pa.binary()
        return pa.Table.from_arrays(
            [pa.array(hashes[order], pa.uint32()), keys.cast(kt), values.cast(kt)], names=["hash", "key", "value"]
        ).combine_chunks()

    def write(self, directory: Path) -> Path:
        """Publish atomically: temporary file, fsync, rename; the file never changes afterwards."""
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / self.ident.file_name
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".build-", suffix=".arrow")
        try:
            with os.fdopen(fd, "wb") as raw:
                schema = self.table.schema.with_metadata({"format": FILE_FORMAT, "entries": str(len(self))})
                with pa.ipc.new_file(raw, schema) as writer:
                    writer.write_table(
                        self.table.replace_schema_metadata(schema.metadata), max_chunksize=max(len(self), 1)
                    )
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return final

    @classmethod
    def open(cls, path: Path) -> Base | None:
        """Map a published base; None (and the file removed) when it is unreadable, e.g. torn by a crash."""
        ident = BaseId.parse(path.name)
        if ident is None:
            return None
        try:
            with pa.memory_map(str(path), "r") as source:
                table = pa.ipc.open_file(source).read_all()
            if table.schema.metadata is None or table.schema.metadata.get(b"format") != FILE_FORMAT.encode():
                raise pa.ArrowInvalid("not a base of this format")
        except (OSError, pa.ArrowInvalid) as e:
            log.warning("removing unreadable local base %s: %s", path, e)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return cls(ident, table, path)

    def lookup(self, keys: pa.Array, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, row index) of each query key."""
        n = len(self)
        if n == 0 or len(hashes) == 0:
            return np.zeros(len(hashes), bool), np.zeros(len(hashes), np.int64)
        idx = np.searchsorted(self.hashes, hashes, side="left")
        idx = np.minimum(idx, n - 1)
        hash_ok = self.hashes[idx] == hashes
        candidates = self.keys.take(pa.array(idx))
        same = pc.equal(candidates, keys.cast(self.keys.type)).to_numpy(zero_copy_only=False)
        found = hash_ok & same
        clash = np.nonzero(hash_ok & ~same)[0]
        if len(clash):  # two keys with one 32-bit hash: look at the neighbours that share it
            for i in clash:
                j, h, want = int(idx[i]) + 1, hashes[i], keys[int(i)].as_py()
                while j < n and self.hashes[j] == h:
                    if self.keys[j].as_py() == want:
                        idx[i], found[i] = j, True
                        break
                    j += 1
        return found, idx


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
            durable = self.durable(home, job, store)
            directories = self.directories(home, job, store, incarnation)
            self._clean_once(directories, generation)
            key = (str(directories[0]), store, generation, cls)
            cached = self._parts.get(key, [])
            for i, part in enumerate(cached):
                if part.base.ident.fraction.covers(fraction) and part.overlay.seq <= version:
                    part = self._advance(durable, incarnation, part, cls, generation, version, directories)
                    cached[i] = part
                    return part
            part = self._from_disk_or_build(durable, directories, incarnation, generation, cls, fraction, version)
            self._parts[key] = [
                p for p in cached if p.overlay.seq <= version and p.base.ident.fraction != part.base.ident.fraction
            ]
            self._parts[key].append(part)
            return part

    def _advance(
        self,
        durable: DurableStore,
        incarnation: str,
        part: Part,
        cls: int,
        generation: int,
        version: int,
        directories: tuple[Path, ...],
    ) -> Part:
        if part.overlay.seq == version:
            return part
        fraction = part.base.ident.fraction
        try:
            tail = durable.read_changes(incarnation, cls, part.overlay.seq, version, fraction)
        except TailGone:  # this base is older than what the store keeps: start from the snapshot instead
            base = self._build_at(durable, directories, incarnation, generation, cls, fraction, version, use_disk=False)
            return Part(base, Overlay(version))
        self.reads += 1
        if tail.num_rows:
            tail = tail.filter(pc.equal(tail["generation"], generation))
        part = Part(part.base, part.overlay.advanced(tail, version))
        if len(part.overlay.entries) > max(REBASE_MIN, REBASE_RATIO * len(part.base)):
            part = self._rebase(durable, directories, incarnation, part, version)
        return part

    def _rebase(
        self, durable: DurableStore, directories: tuple[Path, ...], incarnation: str, part: Part, version: int
    ) -> Part:
        """Fold the overlay into a new base at ``version`` (or map one another process already wrote)."""
        ident = BaseId(part.base.ident.generation, part.base.ident.cls, part.base.ident.fraction, version)
        with _flock(directories, ident):
            base = self._newest_on_disk(directories, ident.generation, ident.cls, ident.fraction, version, exact=True)
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
                base = self._publish(durable.store, directories, ident, fold(current, tail))
        return Part(base, Overlay(version))

    def _from_disk_or_build(
        self,
        durable: DurableStore,
        directories: tuple[Path, ...],
        incarnation: str,
        generation: int,
        cls: int,
        fraction: Fraction,
        version: int,
    ) -> Part:
        base = self._build_at(durable, directories, incarnation, generation, cls, fraction, version, use_disk=True)
        part = Part(base, Overlay(base.ident.seq))
        return self._advance(durable, incarnation, part, cls, generation, version, directories)

    def _build_at(
        self,
        durable: DurableStore,
        directories: tuple[Path, ...],
        incarnation: str,
        generation: int,
        cls: int,
        fraction: Fraction,
        version: int,
        *,
        use_disk: bool,
    ) -> Base:
        """A base at or before ``version`` from this host's disk, or one built at exactly ``version`` from Delta."""
        if use_disk:
            base = self._newest_on_disk(directories, generation, cls, fraction, version)
            if base is not None:
                return base
        ident = BaseId(generation, cls, fraction, version)
        with _flock(directories, ident):  # one process builds, the others wait and map its file
            base = self._newest_on_disk(directories, generation, cls, fraction, version, exact=not use_disk)
            if base is None:
                entries = durable.entries(incarnation, version, cls, generation, fraction)
                base = self._publish(durable.store, directories, ident, entries)
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
        self._prune(directories, ident)
        return mapped

    def _newest_on_disk(
        self,
        directories: tuple[Path, ...],
        generation: int,
        cls: int,
        fraction: Fraction,
        version: int,
        exact: bool = False,
    ) -> Base | None:
        found = [
            (ident.seq, p)
            for p in _files(directories)
            if (ident := BaseId.parse(p.name)) is not None
            and ident.generation == generation
            and ident.cls == cls
            and ident.fraction.covers(fraction)
            and (ident.seq == version if exact else ident.seq <= version)
        ]
        for _, path in sorted(found, reverse=True):
            base = Base.open(path)
            if base is not None:
                return base
        return None

    def _prune(self, directories: tuple[Path, ...], ident: BaseId) -> None:
        """Keep the newest ``KEEP_BASES`` files of one (generation, class, fraction), in all places together;
        mapped ones stay readable."""
        same = sorted(
            (i.seq, p)
            for p in _files(directories)
            if (i := BaseId.parse(p.name)) is not None
            and (i.generation, i.cls, i.fraction) == (ident.generation, ident.cls, ident.fraction)
        )
        for _, path in same[:-KEEP_BASES]:
            with contextlib.suppress(OSError):
                path.unlink()

    def _clean_once(self, directories: tuple[Path, ...], generation: int) -> None:
        """Remove other incarnations of the store and generations older than the one served (once per process)."""
        first = directories[0]
        key = (str(first.parent), first.name, str(generation), "")
        if key in self._cleaned:
            return
        self._cleaned.add(key)
        for directory in directories:
            parent = directory.parent
            if parent.is_dir():
                for other in parent.iterdir():
                    if other.is_dir() and other.name != directory.name:
                        _rmtree(other)
        for p in _files(directories):
            ident = BaseId.parse(p.name)
            if ident is not None and ident.generation < generation:
                with contextlib.suppress(OSError):
                    p.unlink()
        for k in [k for k in self._parts if k[0] == str(first) and k[2] < generation]:
            del self._parts[k]

    def forget(self) -> None:
        """Drop this process's mapped bases and overlays (tests: a fresh process; memory: release maps)."""
        with self._lock:
            self._parts.clear()
            self._cleaned.clear()


def _files(directories: Sequence[Path]) -> list[Path]:
    """The entries of every existing one of ``directories``."""
    return [p for d in directories if d.is_dir() for p in d.iterdir()]


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _flock(directories: tuple[Path, ...], ident: BaseId) -> Iterator[None]:
    directory = directories[-1]  # the fallback: it still takes a lock file when the preferred place is full
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / f".lock-g{ident.generation}-c{ident.cls}"
    with open(lock, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


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


def whole_or(fraction: Fraction | None) -> Fraction:
    return fraction if fraction is not None else WHOLE


def describe_local(root: Path) -> dict[str, Any]:
    """Files and bytes under a local root (operations on an executor host)."""
    files = [p for p in Path(root).rglob("*.arrow")] if Path(root).is_dir() else []
    return {"root": str(root), "bases": len(files), "bytes": sum(p.stat().st_size for p in files)}
