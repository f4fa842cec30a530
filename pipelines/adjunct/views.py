"""What a process function reads: ``ctx.stores["customers"].get(key)`` and ``.get_many(keys)``.

A task gets one ``StoreView`` per store, pinned to the version its micro-batch
names (``StoreVersion``: the store's incarnation, the last segment it
reflects, and for a bounded dataset the generation served). Every lookup of
the task is served from that version, whatever the driver ingests meanwhile,
and ``view.version`` says which one it was.

Broadcast stores answer every key. A partitioned store answers the keys the
task owns: those of its partitions' classes whose key bucket (murmur3 of the
key bytes mod the factor, as for the main input) is the task's bucket; any
other key reads as absent, since it belongs to another virtual task's part.

Keys are bytes (a ``str`` is encoded as UTF-8, as a producer would); values
come back as bytes or None. ``get_many`` takes a list or an Arrow array (e.g.
``records["key"]``) and returns a ``pyarrow.BinaryArray`` with nulls where
nothing is stored, so a process function can append it as a column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.adjunct.bases import hashes_of
from pipelines.adjunct.config import StoreConfig
from pipelines.adjunct.local import LocalEngine, Part, engine_for
from pipelines.adjunct.places import default_local_places
from pipelines.core.adjunct import WHOLE, Fraction, store_class
from pipelines.errors import StoreError
from pipelines.storage.home import Home
from pipelines.systems.base import Position


@dataclass(frozen=True)
class StoreVersion:
    """The version of one store a micro-batch sees; decided on the driver, carried with the batch's plan."""

    store: str
    incarnation: str
    seq: int
    generation: int
    root: int
    positions: Mapping[int, Position] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "incarnation": self.incarnation,
            "seq": self.seq,
            "generation": self.generation,
            "root": self.root,
            "positions": {str(p): v for p, v in sorted(self.positions.items())},
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> StoreVersion:
        return cls(
            store=value["store"],
            incarnation=value["incarnation"],
            seq=int(value["seq"]),
            generation=int(value["generation"]),
            root=int(value["root"]),
            positions={int(p): v for p, v in value.get("positions", {}).items()},
        )

    def __str__(self) -> str:
        return f"{self.store}@{self.seq}" + (f"/g{self.generation}" if self.generation else "")


@dataclass(frozen=True)
class BatchStores:
    """Every store's version for one micro-batch; JSON-serializable for the batch plan and Spark's offset log."""

    versions: Mapping[str, StoreVersion] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({n: v.to_json() for n, v in sorted(self.versions.items())}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> BatchStores:
        value = json.loads(text) if isinstance(text, str) else text
        return cls({n: StoreVersion.from_json(v) for n, v in value.items()})

    def __getitem__(self, store: str) -> StoreVersion:
        return self.versions[store]


class StoreView:
    """One store as one task sees it at one version; immutable and safe to share between threads."""

    def __init__(
        self, name: str, version: StoreVersion, parts: Sequence[Part], fraction: Fraction, partitioned: bool
    ) -> None:
        self.name = name
        self.version = version
        self._parts = list(parts)
        self._fraction = fraction
        self._partitioned = partitioned

    def __repr__(self) -> str:
        scope = f"bucket {self._fraction.bucket} of {self._fraction.factor}" if self._partitioned else "broadcast"
        return f"StoreView({self.name!r}, {self.version}, {scope})"

    def owns(self, key: bytes | str) -> bool:
        """Whether this task's part of the store would hold ``key`` (always true for a broadcast store)."""
        return self._fraction.holds(int(hashes_of([_as_key(key)])[0]))

    def get(self, key: bytes | str) -> bytes | None:
        value: bytes | None = self.get_many([key])[0].as_py()
        return value

    def __contains__(self, key: bytes | str) -> bool:
        return self.get(key) is not None

    def get_many(self, keys: Sequence[bytes | str | None] | pa.Array | pa.ChunkedArray) -> pa.Array:
        """Values of ``keys`` in order, null where absent (or, in a partitioned store, not this task's)."""
        key_list, key_array = _keys(keys)
        n = len(key_list)
        values = pa.nulls(n, pa.binary())
        if n == 0 or not self._parts:
            return values
        hashes = hashes_of(key_list) if key_array.null_count == 0 else _hashes_with_nulls(key_list)
        wanted = np.ones(n, bool) if key_array.null_count == 0 else np.asarray(key_array.is_valid())
        if self._fraction.factor > 1:
            wanted &= (hashes % self._fraction.factor) == self._fraction.bucket
        if not wanted.all():
            index = np.nonzero(wanted)[0]
            sub = self._lookup([key_list[i] for i in index], key_array.take(pa.array(index)), hashes[index])
            out = values.to_pylist()
            for i, v in zip(index.tolist(), sub.to_pylist(), strict=True):
                out[i] = v
            return pa.array(out, pa.binary())
        return self._lookup(key_list, key_array, hashes)

    def _lookup(self, key_list: list[bytes], key_array: pa.Array, hashes: np.ndarray) -> pa.Array:
        found, values = self._parts[0].lookup(key_array, key_list, hashes)
        for part in self._parts[1:]:  # a task reading several classes: look the misses up in the others
            if found.all():
                break
            missing = np.nonzero(~found)[0]
            more_found, more = part.lookup(
                key_array.take(pa.array(missing)), [key_list[i] for i in missing], hashes[missing]
            )
            if more_found.any():
                merged = values.to_pylist()
                for j, i in enumerate(missing.tolist()):
                    if more_found[j]:
                        merged[i] = more[j].as_py()
                        found[i] = True
                values = pa.array(merged, values.type)
        return values.cast(pa.binary()) if values.type != pa.binary() else values


def _as_key(key: Any) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, bytearray | memoryview):
        return bytes(key)
    raise StoreError(f"store keys are bytes or str, got {type(key).__name__}")


def _keys(keys: Any) -> tuple[list[Any], pa.Array]:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(keys, pa.Array):
        if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
            keys = keys.cast(pa.binary())
        elif not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
            raise StoreError(f"store keys are binary or string, got an Arrow array of {keys.type}")
        return keys.to_pylist(), keys
    key_list = [None if k is None else _as_key(k) for k in keys]
    return key_list, pa.array(key_list, pa.binary())


def _hashes_with_nulls(keys: list[bytes | None]) -> np.ndarray:
    return hashes_of([k if k is not None else b"" for k in keys])


# ------------------------------------------------------------------------------------------------------ tasks


def task_stores(
    home: Home,
    job: str,
    stores: Sequence[StoreConfig],
    batch: BatchStores,
    *,
    partitions: Sequence[int] = (),
    bucket: int | None = None,
    factor: int = 1,
    local_dir: str | None = None,
) -> dict[str, StoreView]:
    """The views one virtual task reads, synced to exactly the versions ``batch`` names.

    Call it in the task before its records are processed. ``partitions`` are
    the main-input partitions the task reads, ``bucket``/``factor`` its key
    bucket (None/1: the whole partition). The first call on a host builds
    the store's local base from the durable snapshot (one process builds,
    the others map its file); later calls advance by the changes since.
    """
    views = {}
    fraction = WHOLE if bucket is None or factor == 1 else Fraction(bucket, factor)
    for config in stores:
        version = batch.versions.get(config.name)
        if version is None:
            raise StoreError(
                f"the batch names no version of store {config.name!r}; the driver must ingest every store before "
                "planning a batch (pipelines.adjunct.ingest.AdjunctStores.ingest)"
            )
        engine = _engine(config, local_dir)
        views[config.name] = view_at(engine, home, job, config, version, partitions=partitions, fraction=fraction)
    return views


def view_at(
    engine: LocalEngine,
    home: Home,
    job: str,
    config: StoreConfig,
    version: StoreVersion,
    *,
    partitions: Sequence[int] = (),
    fraction: Fraction = WHOLE,
) -> StoreView:
    if version.generation < 0:  # a bounded dataset with no sealed version yet: nothing is served
        return StoreView(config.name, version, [], fraction, config.partitioned)
    if config.partitioned:
        if not partitions:
            raise StoreError(f"store {config.name!r} is partitioned: a task view needs the task's partitions")
        classes = sorted({store_class(p, version.root) for p in partitions})
        need = fraction
    else:
        classes, need = [0], WHOLE
    parts = [
        engine.part(home, job, config.name, version.incarnation, version.generation, c, need, version.seq)
        for c in classes
    ]
    return StoreView(config.name, version, parts, fraction if config.partitioned else WHOLE, config.partitioned)


def _engine(config: StoreConfig, local_dir: str | None) -> LocalEngine:
    from pathlib import Path

    places = (
        (Path(local_dir) / config.persistence.value,) if local_dir else default_local_places(config.persistence.value)
    )
    return engine_for(places[0], places[1:])
