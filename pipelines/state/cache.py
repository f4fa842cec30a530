"""The executor side of a state: each host's cache of the fractions its virtual tasks own, at exact segments.

A *base* is one fraction (key bucket b of factor X) of a state at one segment, written once on the host's disk as
an Arrow IPC file of row batches sorted by key hash and memory-mapped, so the Python workers of a host share it
through the page cache and a state larger than memory is paged, not loaded. The changes after a base's segment
(the *tail*, read from the ``changes`` table for the base's fraction only) live in a small per-process overlay;
an overlay past ``REBASE_MIN`` rows and ``REBASE_RATIO`` of its base is folded into a new base file, batch by
batch. After a split the parent's base serves both halves as it is (a lookup is by key); a merge or a new host
builds the missing fraction from ``current``. The cache is never the truth: a base names the segment it holds,
and everything can be rebuilt from the home (docs/design.md, "Keyed state").
"""

from __future__ import annotations

import contextlib
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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.core import state as rules
from pipelines.core.adjunct import Fraction
from pipelines.core.hashing import hashes_of as murmur
from pipelines.deltaio import file_batches, read_delta
from pipelines.state import layout
from pipelines.state.durable import StateTables, TailRetired, disjoint, fraction_mask
from pipelines.storage.home import Home
from pipelines.storage.hostlocal import LOCAL_DIR_ENV, published

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "PIPELINES_STATE_CACHE_DIR"
FILE_FORMAT = "1"
BATCH_ROWS = 65_536
REBASE_MIN = 20_000
REBASE_RATIO = 0.25
KEEP_BASES = 2
_NAME = re.compile(r"^f(\d+)of(\d+)-s(\d+)\.arrow$")


def cache_root() -> Path:
    """``$PIPELINES_STATE_CACHE_DIR``, else ``$PIPELINES_LOCAL_DIR/state-cache``, else the temporary directory's
    ``pipelines-state-<uid>``: a host's own disk, never the home."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    host = os.environ.get(LOCAL_DIR_ENV)
    return Path(host) / "state-cache" if host else Path(tempfile.gettempdir()) / f"pipelines-state-{os.getuid()}"


def hashes_of(keys: Sequence[bytes]) -> np.ndarray:
    """The key-bucket hash of each key (``pipelines.core.hashing``), as the ``key_hash`` column holds it."""
    return murmur(keys).astype(np.int64)


# ------------------------------------------------------------------------------------------------------ a base


class Base:
    """One fraction of a state at one segment: row batches sorted by key hash, mapped from their file."""

    def __init__(self, fraction: Fraction, segment: int, batches: list[pa.RecordBatch], path: Path | None) -> None:
        self.fraction, self.segment, self.path = fraction, segment, path
        self.batches = [b for b in batches if b.num_rows]
        self.hashes = [b.column(rules.KEY_HASH).to_numpy() for b in self.batches]
        self.starts = np.array([h[0] for h in self.hashes], dtype=np.int64)
        self.rows = sum(b.num_rows for b in self.batches)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.batches)

    def lookup(self, keys: Sequence[bytes], hashes: np.ndarray) -> dict[bytes, dict[str, Any]]:
        """The rows of those ``keys`` this base holds, by key (``_updated_at`` as microseconds)."""
        found: dict[bytes, dict[str, Any]] = {}
        if not self.batches or not len(keys):
            return found
        which = np.searchsorted(self.starts, hashes, side="right") - 1
        picks: dict[int, list[tuple[int, bytes]]] = {}
        for j, i in enumerate(which.tolist()):
            if i < 0:
                continue
            at = self._find(i, keys[j], int(hashes[j]))
            if at is not None:
                picks.setdefault(at[0], []).append((at[1], keys[j]))
        for i, hits in picks.items():
            taken = self.batches[i].take(pa.array([row for row, _ in hits], pa.int64()))
            for (_, key), row in zip(hits, taken.to_pylist(), strict=True):
                found[key] = row
        return found

    def _find(self, i: int, key: bytes, h: int) -> tuple[int, int] | None:
        """(batch, row) of ``key`` (hash ``h``), looking from batch ``i`` back over the batches a run of its hash
        crosses (keys sharing a 32-bit hash sit side by side, maybe across a batch's edge)."""
        while i >= 0:
            column = self.hashes[i]
            at = int(np.searchsorted(column, h, side="left"))
            names = self.batches[i].column(rules.KEY)
            while at < len(column) and int(column[at]) == h:
                if names[at].as_py() == key:
                    return i, at
                at += 1
            if int(self.starts[i]) != h:
                return None
            i -= 1
        return None

    def iter_batches(self) -> Iterator[pa.RecordBatch]:
        yield from self.batches


def _to_cache_schema(table: pa.Table | pa.RecordBatch, names: Sequence[str]) -> pa.Table:
    """Rows as a base holds them: the ``current`` columns, times as microseconds (cheap to compare in Python)."""
    t = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
    t = t.select(list(names))
    i = t.schema.get_field_index(rules.UPDATED_AT)
    return t.set_column(i, rules.UPDATED_AT, t.column(i).cast(pa.int64()))


def _write_base(directory: Path, fraction: Fraction, segment: int, batches: Iterator[pa.RecordBatch]) -> Path:
    """Publish a base atomically: a temporary file, fsync, rename; it never changes afterwards."""
    final = directory / f"f{fraction.bucket}of{fraction.factor}-s{segment}.arrow"
    with published(final) as raw:  # no batch at all: an empty base is named by an empty file
        writer = None
        for batch in batches:
            if writer is None:
                writer = pa.ipc.new_file(raw, batch.schema.with_metadata({"format": FILE_FORMAT}))
            if batch.num_rows:
                writer.write_batch(batch.replace_schema_metadata({"format": FILE_FORMAT}))
        if writer is not None:
            writer.close()
    return final


def _open_base(path: Path) -> Base | None:
    found = _NAME.match(path.name)
    if found is None:
        return None
    b, x, s = (int(v) for v in found.groups())
    try:
        if path.stat().st_size == 0:
            return Base(Fraction(b, x), s, [], path)
        source = pa.memory_map(str(path), "r")
        reader = pa.ipc.open_file(source)
        if (reader.schema.metadata or {}).get(b"format") != FILE_FORMAT.encode():
            raise pa.ArrowInvalid("not a state base of this format")
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    except (OSError, pa.ArrowInvalid) as e:
        log.warning("removing unreadable state base %s: %s", path, e)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return Base(Fraction(b, x), s, batches, path)


def _sorted_batches(table: pa.Table) -> Iterator[pa.RecordBatch]:
    """A table sorted by key hash, cut into batches of about ``BATCH_ROWS`` that never split a run of one hash."""
    if table.num_rows == 0:
        return
    table = table.sort_by(rules.KEY_HASH).combine_chunks()
    hashes = table.column(rules.KEY_HASH).to_numpy()
    start = 0
    while start < table.num_rows:
        end = min(start + BATCH_ROWS, table.num_rows)
        while end < table.num_rows and hashes[end] == hashes[end - 1]:
            end += 1
        yield from table.slice(start, end - start).to_batches(max_chunksize=end - start)
        start = end


# ------------------------------------------------------------------------------------------------------ a part


@dataclass
class Overlay:
    """The rows changed after a base's segment, up to ``segment``, by key; replaced, never changed in place."""

    segment: int
    rows: dict[bytes, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Part:
    base: Base
    overlay: Overlay

    def lookup(self, keys: Sequence[bytes], hashes: np.ndarray) -> dict[bytes, dict[str, Any]]:
        overlay = self.overlay.rows
        missing = [i for i, k in enumerate(keys) if k not in overlay]
        found = {k: overlay[k] for k in keys if k in overlay}
        if missing:
            found.update(self.base.lookup([keys[i] for i in missing], hashes[missing]))
        return {k: dict(v) for k, v in found.items()}


@dataclass
class ReadStats:
    """What one task's state reads cost: rows and bytes read from the home (bases built, tails), rows looked up."""

    keys_looked_up: int = 0
    rows_found: int = 0
    bytes_from_home: int = 0
    rows_from_home: int = 0
    base_builds: int = 0


class StateCache:
    """This process's parts of every state it serves; one per process (``cache_for``).

    Spark reuses Python workers across batches, so a worker keeps its mapped bases and advances its overlays
    instead of rebuilding; bases on disk are shared by the host's workers (one builds under a file lock, the
    others map its file).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, str, str], list[Part]] = {}
        self._pending: dict[tuple[str, str, str], dict[str, dict[bytes, dict[str, Any]]]] = {}

    def directory(self, home: Home, tables: StateTables) -> Path:
        """A folder per state table incarnation and value schema: a job made again under its name never meets its
        old bases, nor a version that added columns the bases of the version before."""
        identity = tables.changes().metadata().id
        columns = ",".join(f"{c.name}:{c.type}" for c in tables.spec.columns)  # added columns: new bases
        digest = hashlib.sha1(f"{home.root}|{identity}|{columns}".encode()).hexdigest()[:16]
        return self.root / digest / tables.job / tables.spec.name

    def remember_written(self, tables: StateTables, path: str, rows: dict[bytes, dict[str, Any]]) -> None:
        """Rows this process wrote to the change file ``path``: when the file is committed, the next batch's
        advance takes them from here instead of reading the file back."""
        key = (str(tables.home.root), tables.job, tables.spec.name)
        pending = self._pending.setdefault(key, {})
        if len(pending) > 64:
            pending.clear()
        pending[path] = rows

    def part(self, tables: StateTables, fraction: Fraction, segment: int, stats: ReadStats) -> Part:
        """The state's rows of at least ``fraction`` at exactly ``segment``."""
        with self._lock:
            key = (str(tables.home.root), tables.job, tables.spec.name)
            parts = self._parts.setdefault(key, [])
            for i, part in enumerate(parts):
                if part.base.fraction.covers(fraction) and part.overlay.segment <= segment:
                    try:
                        parts[i] = self._advance(tables, part, segment, stats)
                        return parts[i]
                    except TailRetired:
                        del parts[i]
                        break
            part = self._from_disk_or_home(tables, fraction, segment, stats)
            parts[:] = [*[p for p in parts if p.base.fraction != fraction][-7:], part]
            return part

    def _advance(self, tables: StateTables, part: Part, segment: int, stats: ReadStats) -> Part:
        """The part brought from its overlay's segment to ``segment`` by the tail of its own fraction."""
        if part.overlay.segment == segment:
            return part
        fraction, after = part.base.fraction, part.overlay.segment
        actions = tables.change_actions(after, segment, fraction)
        key = (str(tables.home.root), tables.job, tables.spec.name)
        pending = self._pending.get(key, {})
        changes: list[tuple[int, dict[bytes, dict[str, Any]]]] = []
        unread = []
        for action in actions:
            mine = pending.get(action["path"])
            if mine is not None:  # rows this process wrote and the batch committed: no read back
                changes.append((int(action[f"min.{rules.SEGMENT}"]), mine))
            else:
                unread.append(action)
        if unread:  # files other workers wrote (or this one, in an earlier life): this fraction's rows only
            tail = tables.read_actions(unread, after, segment, fraction)
            stats.bytes_from_home += sum(int(a["size_bytes"]) for a in unread)
            stats.rows_from_home += tail.num_rows
            by_segment: dict[int, dict[bytes, dict[str, Any]]] = {}
            for row in _to_cache_schema(tail, layout.row_names(tables.spec)).to_pylist():
                by_segment.setdefault(int(row[rules.SEGMENT]), {})[row[rules.KEY]] = row
            changes.extend(by_segment.items())
        rows = dict(part.overlay.rows)
        for _, changed in sorted(changes, key=lambda c: c[0]):  # one task wrote each key of a segment
            rows.update((k, v) for k, v in changed.items() if fraction.holds(int(v[rules.KEY_HASH])))
        part = Part(part.base, Overlay(segment, rows))
        if len(rows) > max(REBASE_MIN, REBASE_RATIO * part.base.rows):
            part = self._rebase(tables, part)
        return part

    def _from_disk_or_home(self, tables: StateTables, fraction: Fraction, segment: int, stats: ReadStats) -> Part:
        directory = self.directory(tables.home, tables)
        base = _newest_on_disk(directory, fraction, segment)
        if base is None:
            with _flock(directory):
                base = _newest_on_disk(directory, fraction, segment)
                if base is None:
                    base = self._build(tables, directory, fraction, segment, stats)
        part = Part(base, Overlay(base.segment))
        try:
            return self._advance(tables, part, segment, stats)
        except TailRetired:  # a base on disk older than what the changes keep: build afresh
            with _flock(directory):
                base = self._build(tables, directory, fraction, segment, stats)
            return self._advance(tables, Part(base, Overlay(base.segment)), segment, stats)

    def _build(self, tables: StateTables, directory: Path, fraction: Fraction, segment: int, stats: ReadStats) -> Base:
        """A base of ``fraction`` from the newest ``current`` at or before ``segment`` (its tail comes after)."""
        dt, as_of = tables.current_for(segment)
        names = layout.row_names(tables.spec)
        schema = layout.current_schema(tables.spec)
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
        stats.base_builds += 1
        stats.bytes_from_home += sum(int(a["size_bytes"]) for a in actions)

        def batches() -> Iterator[pa.RecordBatch]:
            ordered = sorted(actions, key=lambda a: a.get(f"min.{rules.KEY_HASH}") or 0)
            if disjoint(ordered):  # as compaction writes them: streamed, file by file, batch by batch, in order
                for action in ordered:
                    for batch in file_batches(dt, action, schema):
                        part = pa.Table.from_batches([batch])
                        stats.rows_from_home += part.num_rows
                        if fraction.factor > 1:
                            part = part.filter(fraction_mask(part[rules.KEY_HASH], fraction))
                        if part.num_rows:
                            yield from _to_cache_schema(part, names).combine_chunks().to_batches()
                return
            whole = read_delta(dt, schema=schema)
            stats.rows_from_home += whole.num_rows
            if fraction.factor > 1 and whole.num_rows:
                whole = whole.filter(fraction_mask(whole[rules.KEY_HASH], fraction))
            yield from _sorted_batches(_to_cache_schema(whole, names))

        path = _write_base(directory, fraction, as_of, batches())
        _prune(directory, fraction)
        base = _open_base(path)
        if base is None:
            raise rules.StateError(f"a state base written just now could not be read back: {path}")
        return base

    def _rebase(self, tables: StateTables, part: Part) -> Part:
        """Fold the overlay into a new base file at its segment, one base batch at a time."""
        directory = self.directory(tables.home, tables)
        overlay = pa.Table.from_pylist(list(part.overlay.rows.values()), schema=_cache_schema(tables.spec))
        overlay = overlay.sort_by(rules.KEY_HASH)
        hashes = overlay.column(rules.KEY_HASH).to_numpy()
        base = part.base

        def batches() -> Iterator[pa.RecordBatch]:
            if not base.batches:
                yield from _sorted_batches(overlay)
                return
            bounds = [*base.starts[1:].tolist(), int(np.iinfo(np.int64).max)]
            taken = 0
            for batch, high in zip(base.batches, bounds, strict=True):
                end = int(np.searchsorted(hashes, high, side="left"))
                mine = overlay.slice(taken, end - taken)
                taken = end
                kept = pa.Table.from_batches([batch])
                if mine.num_rows:
                    kept = kept.filter(pc.invert(pc.is_in(kept[rules.KEY], value_set=mine[rules.KEY])))
                yield from _sorted_batches(pa.concat_tables([kept, mine.cast(kept.schema)]))
            if taken < overlay.num_rows:
                yield from _sorted_batches(overlay.slice(taken))

        with _flock(directory):
            path = _write_base(directory, base.fraction, part.overlay.segment, batches())
            _prune(directory, base.fraction)
        rebased = _open_base(path)
        if rebased is None:
            raise rules.StateError(f"a state base written just now could not be read back: {path}")
        return Part(rebased, Overlay(part.overlay.segment))

    def forget(self) -> None:
        """Drop this process's parts (tests: a fresh process)."""
        with self._lock:
            self._parts.clear()
            self._pending.clear()


def _cache_schema(spec: rules.StateSpec) -> pa.Schema:
    schema = layout.current_schema(spec)
    i = schema.get_field_index(rules.UPDATED_AT)
    return schema.set(i, pa.field(rules.UPDATED_AT, pa.int64()))


def _newest_on_disk(directory: Path, fraction: Fraction, segment: int) -> Base | None:
    if not directory.is_dir():
        return None
    found = []
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m is None:
            continue
        b, x, s = (int(v) for v in m.groups())
        if s <= segment and Fraction(b, x).covers(fraction):
            found.append((s, x, p))
    for _, _, path in sorted(found, reverse=True):
        base = _open_base(path)
        if base is not None:
            return base
    return None


def _prune(directory: Path, fraction: Fraction) -> None:
    """Keep the newest ``KEEP_BASES`` files of a fraction (a mapped older one stays readable until unmapped)."""
    mine = []
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m is not None and (int(m.group(1)), int(m.group(2))) == (fraction.bucket, fraction.factor):
            mine.append((int(m.group(3)), p))
    for _, path in sorted(mine, reverse=True)[KEEP_BASES:]:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _flock(directory: Path) -> Iterator[None]:
    """The host-wide lock of one state's cache folder: one process builds a base, the others wait and map it."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


_CACHES: dict[Path, StateCache] = {}
_CACHES_LOCK = threading.Lock()


def cache_for(root: Path | None = None) -> StateCache:
    """This process's cache under ``root`` (default ``cache_root()``)."""
    key = root or cache_root()
    with _CACHES_LOCK:
        if key not in _CACHES:
            _CACHES[key] = StateCache(key)
        return _CACHES[key]
