"""Skew is flagged when a task gets more records than its keys account for, beyond chance: a hot key bucket.

The records are routed as the platform routes them: the embedded log places a
key by Kafka's murmur2 over 2 partitions, the job buckets it by murmur3 at
factor 8, so 16 virtual tasks; each task counts its records and its distinct
keys, as the runtime reports ``records_in`` and ``keys_in``.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pipelines.core.hashing import key_bucket
from pipelines.core.partitioner import murmur2
from pipelines.observe.skew import ALPHA, critical_z, judge

PARTITIONS, FACTOR = 2, 8


def routed(keys: list[bytes]) -> tuple[list[int], list[int]]:
    """Records and distinct keys per virtual task (partition, bucket), for one batch of record keys."""
    records: Counter[tuple[int, int]] = Counter()
    distinct: dict[tuple[int, int], set[bytes]] = {}
    for key, count in Counter(keys).items():  # no null key: a key's task depends on the key alone
        task = ((murmur2(key) & 0x7FFFFFFF) % PARTITIONS, key_bucket(key, 0, FACTOR))
        records[task] += count
        distinct.setdefault(task, set()).add(key)
    tasks = [(p, b) for p in range(PARTITIONS) for b in range(FACTOR)]
    return [records[t] for t in tasks], [len(distinct.get(t, ())) for t in tasks]


def uniform(rng: random.Random, records: int = 4000, keys: int = 100) -> list[bytes]:
    return [f"key-{rng.randrange(keys)}".encode() for _ in range(records)]


def with_hot_key(rng: random.Random, records: int = 4000, keys: int = 100, hot: float = 0.2) -> list[bytes]:
    """``hot`` of the records carry one key (key-7); the rest are spread uniformly over all keys."""
    return [b"key-7" if rng.random() < hot else f"key-{rng.randrange(keys)}".encode() for _ in range(records)]


def test_4000_records_of_100_uniform_keys_at_factor_8_flag_nothing_though_shares_differ() -> None:
    records, keys = routed(uniform(random.Random(31)))
    verdicts = judge(records, keys)
    assert not [v for v in verdicts if v.skewed]
    # what the share of records alone said: some tasks well above the fair share (hash luck over 100 keys)
    fair = sum(records) / len(records)
    assert max(records) >= 1.5 * fair
    assert any(v.skewed for v in judge(records))  # judged without key counts, that luck is a false alarm
    assert {v.basis for v in verdicts} == {"keys"}


def test_a_hot_key_flags_its_task_and_only_it() -> None:
    rng = random.Random(32)
    records, keys = routed(with_hot_key(rng))
    verdicts = judge(records, keys)
    hot = ((murmur2(b"key-7") & 0x7FFFFFFF) % PARTITIONS) * FACTOR + key_bucket(b"key-7", 0, FACTOR)
    assert [i for i, v in enumerate(verdicts) if v.skewed] == [hot]
    assert (verdicts[hot].ratio or 0) > 3 and (verdicts[hot].z or 0) > critical_z(len(records))


def test_over_many_samples_false_alarms_stay_rare_and_hot_keys_are_found() -> None:
    rng = random.Random(33)
    samples = 200
    false_alarms = sum(any(v.skewed for v in judge(*routed(uniform(rng)))) for _ in range(samples))
    found = sum(any(v.skewed for v in judge(*routed(with_hot_key(rng)))) for _ in range(samples))
    assert false_alarms <= 2  # ALPHA per table: 0.2 expected in 200; the share-of-records rule flagged most
    assert found >= samples - 2


def test_without_key_counts_the_fair_share_is_the_expectation_and_few_records_judge_nothing() -> None:
    verdicts = judge([400, 100, 100, 100])
    assert [v.skewed for v in verdicts] == [True, False, False, False]
    assert verdicts[0].basis == "records" and verdicts[0].ratio == pytest.approx(400 / 175)
    assert not any(v.skewed for v in judge([8, 1, 1, 1]))  # 2.75 expected each: too few to judge
    assert not any(v.skewed for v in judge([0, 0]) + judge([50]))


def test_the_bar_rises_with_the_number_of_tasks_judged() -> None:
    assert critical_z(2) < critical_z(16) < critical_z(1024)
    assert critical_z(1, alpha=ALPHA) == pytest.approx(3.09, abs=0.01)
