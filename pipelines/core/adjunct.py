"""The pure rules of adjunct data (AD) stores: recovery, validity, key-space division, bounded versions, checks.

Everything here is a decision over plain values, so it is tested table by
table without Delta, Spark or a stream (``tests/unit/core/test_adjunct.py``).
The I/O lives in ``pipelines.adjunct``; it asks these functions what to do.

Recovery (the AD-store proposal's table, held exactly)
    When a job starts, each store is found in one of three states: absent (no
    durable store), present but invalid, present and valid. With its
    persistence and bootstrap settings that decides two things: what happens
    to the store (create it, re-create it, keep it) and where its stream is
    read from (force a bootstrap from the stream's beginning, or continue from
    the last offset). ``RECOVERY_TABLE`` is the proposal's table; a memory
    store never survives a job restart, so whatever is found of it is
    re-created ("for non-persistent stores, bootstrap is always forced if a
    stream is marked for bootstrap; otherwise continue from last offset").

Validity
    As the proposal says: a store whose latest update is older than its
    validity age is invalid. Two further reasons make a store invalid because
    continuing from it would serve wrong data, not merely old data: it was
    built for another stream, extractor, partitioning or dataset kind (its
    fingerprint differs), or the stream no longer holds the records after the
    store's positions (it fell off the stream's retention, the case the
    proposal's "future" offset comparison is about).

Key-space division of a partitioned store
    A virtual task owns key bucket ``b`` of factor ``X`` of some partitions.
    The store is divided the same way: a *class* is an AD partition modulo the
    stream's partition count before its first expansion (so after an expansion
    from N to kN, partitions p, p + N, ... form one class, exactly the SEP-5
    set a fixed-task-num task reads), and a *fraction* ``(b, X)`` of a class
    holds the keys whose murmur3 hash is ``b`` mod ``X``. A fraction covers
    another when its factor divides the other's and the buckets agree, so a
    split (X to 2X) is served by the fraction already loaded, and only a
    merge or a move to a new host loads a fraction (from the durable
    snapshot, filtered by the hash kept with each entry).

Bounded datasets
    A bounded dataset's records are grouped into *generations* by end markers:
    every partition of the AD stream ends generation g with a marker, and
    generation g is sealed once every partition has delivered its marker. The
    store serves the newest sealed generation, and moves to the next one only
    between micro-batches (the driver names the generation a batch sees).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pipelines.errors import ConfigError

# ---------------------------------------------------------------------------------------------------- settings


class Persistence(StrEnum):
    PERSISTENT = "persistent"
    MEMORY = "memory"


class Partitioning(StrEnum):
    BROADCAST = "broadcast"
    PARTITIONED = "partitioned"


class Dataset(StrEnum):
    UNBOUNDED = "unbounded"
    BOUNDED = "bounded"


# ---------------------------------------------------------------------------------------------------- recovery


class Found(StrEnum):
    """What a job start finds of a store."""

    ABSENT = "absent"
    INVALID = "invalid"
    VALID = "valid"


class Action(StrEnum):
    CREATE = "create new store"
    RECREATE = "re-create store"
    KEEP = "keep store"


class Start(StrEnum):
    BOOTSTRAP = "force bootstrap"
    LAST_OFFSET = "continue from last offset"


@dataclass(frozen=True)
class Recovery:
    action: Action
    start: Start

    def __str__(self) -> str:
        return f"{self.action.value}, {self.start.value}"


_C, _R, _K = Action.CREATE, Action.RECREATE, Action.KEEP
_B, _L = Start.BOOTSTRAP, Start.LAST_OFFSET

RECOVERY_TABLE: Mapping[tuple[Persistence, bool, Found], Recovery] = {
    # persistent stores: the proposal's table, row "stream marked for bootstrap"
    (Persistence.PERSISTENT, True, Found.ABSENT): Recovery(_C, _B),
    (Persistence.PERSISTENT, True, Found.INVALID): Recovery(_R, _B),
    (Persistence.PERSISTENT, True, Found.VALID): Recovery(_K, _L),
    # row "stream not marked for bootstrap"
    (Persistence.PERSISTENT, False, Found.ABSENT): Recovery(_C, _L),
    (Persistence.PERSISTENT, False, Found.INVALID): Recovery(_R, _L),
    (Persistence.PERSISTENT, False, Found.VALID): Recovery(_K, _L),
    # non-persistent stores: nothing survives a restart; bootstrap forced if marked, else last offset
    (Persistence.MEMORY, True, Found.ABSENT): Recovery(_C, _B),
    (Persistence.MEMORY, True, Found.INVALID): Recovery(_R, _B),
    (Persistence.MEMORY, True, Found.VALID): Recovery(_R, _B),
    (Persistence.MEMORY, False, Found.ABSENT): Recovery(_C, _L),
    (Persistence.MEMORY, False, Found.INVALID): Recovery(_R, _L),
    (Persistence.MEMORY, False, Found.VALID): Recovery(_R, _L),
}
"""(persistence, bootstrap, found) -> what to do; every combination is listed, none is computed."""


def decide_recovery(persistence: Persistence | str, bootstrap: bool, found: Found | str) -> Recovery:
    """The proposal's recovery decision for one store at job start."""
    return RECOVERY_TABLE[(Persistence(persistence), bool(bootstrap), Found(found))]


# ---------------------------------------------------------------------------------------------------- validity


@dataclass(frozen=True)
class Validity:
    found: Found
    reason: str


def judge_store(
    *,
    exists: bool,
    last_update: datetime | None,
    now: datetime,
    max_age: timedelta | None,
    fingerprint: Mapping[str, Any] | None,
    expected_fingerprint: Mapping[str, Any],
    fallen_off: Sequence[int] = (),
) -> Validity:
    """Whether a store found at job start may be continued, and why not.

    ``last_update`` is the latest time the store was known current (its last
    write, or the last checkpoint that recorded it); ``fallen_off`` lists the
    AD partitions whose earliest readable position is past the store's.
    """
    if not exists:
        return Validity(Found.ABSENT, "no store")
    if fingerprint is not None and dict(fingerprint) != dict(expected_fingerprint):
        changed = sorted(
            k for k in set(fingerprint) | set(expected_fingerprint) if fingerprint.get(k) != expected_fingerprint.get(k)
        )
        return Validity(Found.INVALID, f"built for another configuration ({', '.join(changed)} changed)")
    if fallen_off:
        return Validity(
            Found.INVALID,
            f"the stream no longer holds the records after the store's positions in partitions {list(fallen_off)}",
        )
    if max_age is not None:
        if last_update is None:
            return Validity(Found.INVALID, "its last update time is unknown")
        age = now - last_update
        if age > max_age:
            return Validity(
                Found.INVALID, f"last updated {_human(age)} ago, older than its validity age {_human(max_age)}"
            )
    return Validity(Found.VALID, "valid")


def _human(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


# ---------------------------------------------------------------------------------------------------- division


def class_root(partition_count: int, first_expansion_from: int | None) -> int:
    """The partition count a store's classes are taken modulo: the stream's count before its first expansion."""
    root = first_expansion_from if first_expansion_from is not None else partition_count
    if root < 1 or partition_count % root:
        raise ConfigError(
            f"a stream of {partition_count} partitions cannot descend from {root} partitions by expansion "
            "(an expansion multiplies the count)"
        )
    return root


def store_class(partition: int, root: int) -> int:
    """The class of an AD (or main-input) partition: SEP-5 keeps a key within ``p mod root`` across expansions."""
    return partition % root


@dataclass(frozen=True, order=True)
class Fraction:
    """Keys whose hash is ``bucket`` mod ``factor``; ``Fraction(0, 1)`` is the whole class."""

    bucket: int
    factor: int

    def __post_init__(self) -> None:
        if self.factor < 1 or not 0 <= self.bucket < self.factor:
            raise ValueError(f"fraction needs 0 <= bucket < factor, got {self.bucket} of {self.factor}")

    def covers(self, other: Fraction) -> bool:
        """Every key of ``other`` is a key of this fraction."""
        return other.factor % self.factor == 0 and other.bucket % self.factor == self.bucket

    def holds(self, key_hash: int) -> bool:
        return key_hash % self.factor == self.bucket

    @property
    def label(self) -> str:
        return f"{self.bucket}of{self.factor}"


WHOLE = Fraction(0, 1)


def covered_by_union(target: Fraction, fractions: Iterable[Fraction]) -> bool:
    """Whether the union of ``fractions`` holds every key of ``target`` (e.g. two halves after a merge)."""
    parts = [f for f in fractions if _overlaps(f, target)]
    if any(f.covers(target) for f in parts):
        return True
    if not parts:
        return False
    modulus = target.factor
    for f in parts:
        modulus = math.lcm(modulus, f.factor)
        if modulus > 1 << 16:  # factors this large do not occur; refuse rather than loop for long
            return False
    return all(any(f.holds(r) for f in parts) for r in range(target.bucket, modulus, target.factor))


def _overlaps(a: Fraction, b: Fraction) -> bool:
    g = math.gcd(a.factor, b.factor)
    return a.bucket % g == b.bucket % g


# ---------------------------------------------------------------------------------------------------- bounded versions


@dataclass(frozen=True)
class Generations:
    """Per AD partition, the generation it is delivering now; the store serves the newest sealed one.

    Generation g of partition p is complete when p delivered its g-th end
    marker (so p now delivers g + 1). The dataset's generation g is sealed
    when every partition completed it; records arriving after a partition's
    marker belong to the next generation there, while the store keeps serving
    the sealed one.
    """

    delivering: Mapping[int, int] = field(default_factory=dict)

    def sealed(self, partitions: Iterable[int]) -> int:
        """The newest generation every partition has completed, or -1 when none is."""
        parts = list(partitions)
        if not parts:
            return -1
        return min(self.delivering.get(p, 0) for p in parts) - 1

    def after_marker(self, partition: int) -> Generations:
        current = dict(self.delivering)
        current[partition] = current.get(partition, 0) + 1
        return Generations(current)

    def of(self, partition: int) -> int:
        return self.delivering.get(partition, 0)

    def to_json(self) -> dict[str, int]:
        return {str(p): g for p, g in sorted(self.delivering.items())}

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Generations:
        return cls({int(p): int(g) for p, g in (value or {}).items()})


def serving_generation(dataset: Dataset | str, generations: Generations, partitions: Iterable[int]) -> int:
    """The generation lookups are served from: 0 for an unbounded store, the newest sealed one for a bounded store.

    A bounded store with no sealed generation yet serves generation -1, which
    holds nothing: half a dataset is never served.
    """
    if Dataset(dataset) is Dataset.UNBOUNDED:
        return 0
    return generations.sealed(partitions)


# ---------------------------------------------------------------------------------------------------- change semantics


def apply_changes(state: Mapping[bytes, bytes], changes: Iterable[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    """The reference CDC semantics: changes in stream order, a ``None`` value deletes the key.

    Applying a suffix of ``changes`` again gives the same state (at-least-once
    delivery is enough for a keyed store); the engine is tested against this.
    """
    result = dict(state)
    for key, value in changes:
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


# ---------------------------------------------------------------------------------------------------- quality check


@dataclass(frozen=True)
class SampleVerdict:
    success: bool
    checked: int
    mismatches: int
    examples: tuple[str, ...]


def compare_sample(
    expected: Mapping[bytes, bytes | None], served: Mapping[bytes, bytes | None], *, examples: int = 5
) -> SampleVerdict:
    """Lookups served by a store against the AD stream's latest value of each sampled key (None: absent)."""
    bad = []
    for key in sorted(expected):
        want, got = expected[key], served.get(key)
        if want != got:
            bad.append(f"key {_show(key)}: stream has {_show(want)}, store served {_show(got)}")
    return SampleVerdict(not bad, len(expected), len(bad), tuple(bad[:examples]))


def sample_keys(keys: Sequence[bytes], size: int, seed: int = 0) -> list[bytes]:
    """A reproducible sample of distinct keys."""
    distinct = sorted(set(keys))
    if size >= len(distinct):
        return distinct
    return sorted(random.Random(seed).sample(distinct, size))


def _show(value: bytes | None, limit: int = 40) -> str:
    if value is None:
        return "nothing"
    text = value[:limit].decode("utf-8", "backslashreplace")
    return repr(text + ("..." if len(value) > limit else ""))
