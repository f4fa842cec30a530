"""The key-bucket hash: which virtual task of a partition a record belongs to.

``bucket = H(key bytes) mod X``, H being MurmurHash3 x86 32-bit with seed 0,
read unsigned: a published algorithm (the same in every process and Python
version, unlike ``hash()``), always in ``[0, X)`` (no ``abs(MIN_VALUE)``
trap), and unrelated to Kafka's murmur2 partitioner, so buckets inside one
partition stay balanced (``tests/unit/core/test_hashing.py`` measures it). A
null key hashes its record's position string (SEP-32's offset). Why each
choice: docs/design.md, "Key buckets and the hash".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import mmh3
import numpy as np

from pipelines.core.limits import shown, whole_number
from pipelines.errors import ConfigError

HASH_NAME = "murmur3_x86_32(seed=0, unsigned)"
MAX_FACTOR = 1024
MAX_FACTOR_ENV = "PIPELINES_MAX_FACTOR"


def key_hash(key: bytes | None, offset: int | str) -> int:
    """The 32-bit unsigned hash of a record's key, or of its offset if the key is null."""
    data = key if key is not None else str(offset).encode()
    return mmh3.hash(data, 0, signed=False)


def key_bucket(key: bytes | None, offset: int | str, factor: int) -> int:
    """The key bucket of one record for elasticity factor ``factor``."""
    return key_hash(key, offset) % factor


def key_buckets(keys: Sequence[bytes | None], offsets: Sequence[int | str], factor: int) -> list[int]:
    """Key buckets of a batch of records; the hot path of routing."""
    hash_ = mmh3.hash
    return [
        hash_(k if k is not None else str(o).encode(), 0, signed=False) % factor
        for k, o in zip(keys, offsets, strict=True)
    ]


def validate_factor(factor: object) -> int:
    """Return the elasticity factor as an int, or explain why it is not one.

    A string must be ASCII digits 0-9 (``str.isdigit`` also takes ``²``, which
    ``int()`` refuses), and not so long that it cannot be a factor at all.
    """
    if isinstance(factor, str):
        parsed = whole_number(factor)
        if parsed is None:
            text = factor.strip()
            if text.isascii() and text.isdigit():  # digits, but more than any factor has
                raise ConfigError(f"elasticity factor {shown(text)} is above the maximum {max_factor()}")
            hint = _digits(text)
            raise ConfigError(f"elasticity factor must be a whole number >= 1, got {shown(factor)} (str){hint}")
        factor = parsed
    elif isinstance(factor, bool) or not isinstance(factor, int):
        raise ConfigError(
            f"elasticity factor must be a whole number >= 1, got {shown(factor)} ({type(factor).__name__})"
        )
    if factor < 1:
        raise ConfigError(f"elasticity factor must be >= 1, got {shown(factor)}")
    limit = max_factor()
    if factor > limit:
        if factor.bit_length() > 64:
            raise ConfigError(f"elasticity factor {shown(factor)} is above the maximum {limit}")
        raise ConfigError(
            f"elasticity factor {factor} is above the maximum {limit}: every input partition would get {factor} "
            f"virtual tasks and {factor} checkpoint rows; set {MAX_FACTOR_ENV} to allow more"
        )
    return factor


def _digits(text: str) -> str:
    """A hint for a number written in other digits than 0-9 (``²``, ``٣``), which no count here accepts."""
    return ": write it in digits 0-9" if any(c.isnumeric() and not c.isascii() for c in text) else ""


def max_factor() -> int:
    """The largest factor accepted: a typo (100000 for 10) would otherwise plan millions of tasks before failing."""
    raw = os.environ.get(MAX_FACTOR_ENV, "").strip()
    if not raw:
        return MAX_FACTOR
    limit = whole_number(raw)
    if limit is None or limit < 1:
        raise ConfigError(f"{MAX_FACTOR_ENV} must be a whole number >= 1, got {shown(raw)}{_digits(raw)}")
    return limit


def buckets_of(factor: int) -> Iterable[int]:
    """All key buckets of a factor, in order."""
    return range(validate_factor(factor))


def hashes_of(keys: Sequence[bytes]) -> np.ndarray:
    """``key_hash`` of each key (none may be null), as unsigned 32-bit numbers: a store's or a state's index."""
    h = mmh3.hash
    return np.fromiter((h(k, 0, signed=False) for k in keys), dtype=np.uint32, count=len(keys))


def in_fraction(hashes: np.ndarray, bucket: int, factor: int) -> np.ndarray:
    """Which of ``hashes`` fall in key bucket ``bucket`` of ``factor`` (hash mod factor == bucket)."""
    return np.asarray(hashes % factor == bucket)
