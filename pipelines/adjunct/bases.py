"""A base: one (generation, class, fraction) of a store at one version, as an immutable hash-sorted Arrow file.

It is written once (temporary file, fsync, rename) and memory-mapped, so the
Python workers of a host share it through the page cache and a crash leaves no
file or a whole one. Why this format: docs/decisions/0012-adjunct-store-engine.md.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.core.adjunct import Fraction
from pipelines.core.hashing import hashes_of
from pipelines.storage.hostlocal import published

__all__ = ["FILE_OVERHEAD", "Base", "BaseId", "hashes_of"]

log = logging.getLogger(__name__)

FILE_FORMAT = "1"
FILE_OVERHEAD = 64 * 1024
"""Bytes a base's file takes beyond its table's buffers (schema, footer, alignment), at most."""
_NAME = re.compile(r"^g(-?\d+)-c(\d+)-f(\d+)of(\d+)-s(\d+)\.arrow$")


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
        final = directory / self.ident.file_name
        with published(final) as raw:
            schema = self.table.schema.with_metadata({"format": FILE_FORMAT, "entries": str(len(self))})
            with pa.ipc.new_file(raw, schema) as writer:
                writer.write_table(self.table.replace_schema_metadata(schema.metadata), max_chunksize=max(len(self), 1))
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
