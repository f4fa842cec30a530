from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.hashing import MAX_FACTOR, MAX_FACTOR_ENV, key_bucket, key_buckets, key_hash, validate_factor
from pipelines.core.partitioner import kafka_partition, murmur2
from pipelines.errors import ConfigError

KEYS = [f"key-{i}".encode() for i in range(10_000)]


def test_hash_is_murmur3_x86_32_reference_vectors() -> None:
    # Published MurmurHash3_x86_32 vectors (seed 0): the hash is a documented algorithm, not ours.
    assert key_hash(b"", 0) == 0
    assert key_hash(b"hello", 0) == 0x248BFA47
    assert key_hash(b"The quick brown fox jumps over the lazy dog", 0) == 0x2E4FF723


@given(st.binary(max_size=64) | st.none(), st.integers(min_value=0, max_value=2**200), st.integers(1, 10_000))
def test_bucket_always_in_range(key: bytes | None, offset: int, factor: int) -> None:
    assert 0 <= key_bucket(key, offset, factor) < factor


def test_high_bit_hashes_are_not_negative() -> None:
    # Samza's abs(hashCode) % X went negative for MIN_VALUE; find keys whose hash has the top bit set.
    high = [k for k in KEYS[:2000] if key_hash(k, 0) >= 2**31]
    assert high, "expected some hashes with the top bit set"
    assert all(0 <= key_bucket(k, 0, 7) < 7 for k in high)


def test_null_key_hashes_the_offset() -> None:
    assert key_hash(None, 42) == key_hash(b"42", 0)
    buckets = {key_bucket(None, off, 8) for off in range(200)}
    assert buckets == set(range(8)), "null-key records must spread over buckets by offset"
    # Kinesis sequence numbers are big integers: same rule, no overflow.
    seq = "49590338271490256608559692538361571095921575989136588898"
    assert key_hash(None, seq) == key_hash(seq.encode(), 0)


def test_batch_form_matches_single_form() -> None:
    keys: list[bytes | None] = [*KEYS[:50], None, None]
    offsets = list(range(len(keys)))
    assert key_buckets(keys, offsets, 6) == [key_bucket(k, o, 6) for k, o in zip(keys, offsets, strict=True)]


def test_hash_is_stable_across_processes_and_hash_seeds() -> None:
    code = (
        "import json,sys; from pipelines.core.hashing import key_bucket;"
        "print(json.dumps([key_bucket(f'key-{i}'.encode(), i, 16) for i in range(500)]))"
    )
    here = [key_bucket(f"key-{i}".encode(), i, 16) for i in range(500)]
    for seed in ("0", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == here


def _bucket_counts(partition: int, partitions: int, factor: int, hash_bucket) -> Counter[int]:
    return Counter(hash_bucket(k) for k in KEYS if kafka_partition(k, partitions) == partition)


@pytest.mark.parametrize("partitions", [1, 2, 4, 8])
def test_buckets_are_balanced_inside_a_murmur2_partition(partitions: int) -> None:
    factor = 8
    for p in range(partitions):
        counts = _bucket_counts(p, partitions, factor, lambda k: key_bucket(k, 0, factor))
        mean = sum(counts.values()) / factor
        assert len(counts) == factor, f"partition {p}: some bucket is empty: {dict(counts)}"
        assert max(counts.values()) <= 1.5 * mean, f"partition {p}: unbalanced {dict(counts)}"


def test_balance_check_would_catch_a_hash_correlated_with_the_partitioner() -> None:
    # If H were Kafka's own murmur2, partition 0 of 2 would only ever see even buckets.
    counts = _bucket_counts(0, 2, 8, lambda k: (murmur2(k) & 0x7FFFFFFF) % 8)
    assert len(counts) == 4


@pytest.mark.parametrize(
    "bad",
    [
        0,
        -1,
        1.5,
        "abc",
        None,
        True,
        "0",
        "²",
        "٣",
        "1_0",
        pytest.param("9" * 5000, id="5000-digits"),
        pytest.param(10**5000, id="10**5000"),
    ],
)
def test_invalid_factor_is_refused_with_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="elasticity factor") as info:
        validate_factor(bad)
    assert len(str(info.value)) < 200 and "\n" not in str(info.value)  # one short line, however long the input


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("²", "elasticity factor must be a whole number >= 1, got '²' (str): write it in digits 0-9"),
        ("٣", "elasticity factor must be a whole number >= 1, got '٣' (str): write it in digits 0-9"),
        pytest.param(
            "9" * 5000,
            f"elasticity factor '{'9' * 56}... (5,002 characters) is above the maximum {MAX_FACTOR}",
            id="5000-digits",
        ),
        pytest.param(
            10**5000, f"elasticity factor <a number of about 5,001 digits> is above the maximum {MAX_FACTOR}", id="int"
        ),
    ],
)
def test_other_digits_and_overlong_numbers_are_refused_saying_what_a_factor_must_be(text: object, message: str) -> None:
    """``str.isdigit`` takes '²' (``int()`` then raised ValueError) and ``int()`` of 5,000 digits raised too."""
    with pytest.raises(ConfigError) as info:
        validate_factor(text)
    assert str(info.value) == message


def test_factor_from_text_is_accepted() -> None:
    assert validate_factor("4") == 4


def test_a_factor_above_the_maximum_is_refused_and_the_maximum_is_configurable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert validate_factor(MAX_FACTOR) == MAX_FACTOR
    with pytest.raises(ConfigError, match=f"elasticity factor 100000 is above the maximum {MAX_FACTOR}"):
        validate_factor(100_000)
    monkeypatch.setenv(MAX_FACTOR_ENV, "4")
    with pytest.raises(ConfigError, match=f"above the maximum 4: .* set {MAX_FACTOR_ENV} to allow more"):
        validate_factor(5)
    monkeypatch.setenv(MAX_FACTOR_ENV, "many")
    with pytest.raises(ConfigError, match=f"{MAX_FACTOR_ENV} must be a whole number >= 1, got 'many'"):
        validate_factor(2)
    monkeypatch.setenv(MAX_FACTOR_ENV, "²")
    with pytest.raises(ConfigError, match=f"{MAX_FACTOR_ENV} must be a whole number >= 1, got '²': write it in digits"):
        validate_factor(2)
    monkeypatch.setenv(MAX_FACTOR_ENV, "9" * 5000)
    with pytest.raises(ConfigError, match=f"{MAX_FACTOR_ENV} must be a whole number >= 1, got '999.*characters"):
        validate_factor(2)
