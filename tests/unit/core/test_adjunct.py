"""The pure rules of adjunct stores: the recovery table row by row, validity, key-space division, versions, CDC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.adjunct import (
    RECOVERY_TABLE,
    WHOLE,
    Action,
    Dataset,
    Found,
    Fraction,
    Generations,
    Persistence,
    Start,
    apply_changes,
    class_root,
    compare_sample,
    covered_by_union,
    decide_recovery,
    judge_store,
    sample_keys,
    serving_generation,
    store_class,
)
from pipelines.errors import ConfigError

NOW = datetime(2026, 1, 2, tzinfo=UTC)
FP = {"stream": "customers", "extractor": "default"}

# ------------------------------------------------------------------------------------------ recovery table

# The proposal's table, written out independently of the code: (persistence, bootstrap, found) -> (action, start).
PROPOSAL = [
    ("persistent", True, "absent", Action.CREATE, Start.BOOTSTRAP),
    ("persistent", True, "invalid", Action.RECREATE, Start.BOOTSTRAP),
    ("persistent", True, "valid", Action.KEEP, Start.LAST_OFFSET),
    ("persistent", False, "absent", Action.CREATE, Start.LAST_OFFSET),
    ("persistent", False, "invalid", Action.RECREATE, Start.LAST_OFFSET),
    ("persistent", False, "valid", Action.KEEP, Start.LAST_OFFSET),
    ("memory", True, "absent", Action.CREATE, Start.BOOTSTRAP),
    ("memory", True, "invalid", Action.RECREATE, Start.BOOTSTRAP),
    ("memory", True, "valid", Action.RECREATE, Start.BOOTSTRAP),
    ("memory", False, "absent", Action.CREATE, Start.LAST_OFFSET),
    ("memory", False, "invalid", Action.RECREATE, Start.LAST_OFFSET),
    ("memory", False, "valid", Action.RECREATE, Start.LAST_OFFSET),
]


@pytest.mark.parametrize(("persistence", "bootstrap", "found", "action", "start"), PROPOSAL)
def test_recovery_table_row(persistence: str, bootstrap: bool, found: str, action: Action, start: Start) -> None:
    decided = decide_recovery(persistence, bootstrap, found)
    assert (decided.action, decided.start) == (action, start)


def test_recovery_table_has_every_combination_and_nothing_else() -> None:
    combos = {(Persistence(p), b, Found(f)) for p, b, f, *_ in PROPOSAL}
    assert set(RECOVERY_TABLE) == combos
    assert len(combos) == len(Persistence) * 2 * len(Found)


def test_memory_store_is_never_kept() -> None:
    assert all(r.action is not Action.KEEP for (p, _, _), r in RECOVERY_TABLE.items() if p is Persistence.MEMORY)


# ------------------------------------------------------------------------------------------ validity


def _judge(**overrides: object) -> tuple[Found, str]:
    args = {
        "exists": True,
        "last_update": NOW - timedelta(hours=1),
        "now": NOW,
        "max_age": timedelta(days=1),
        "fingerprint": FP,
        "expected_fingerprint": FP,
    }
    args.update(overrides)
    v = judge_store(**args)  # type: ignore[arg-type]
    return v.found, v.reason


def test_valid_store() -> None:
    assert _judge()[0] is Found.VALID


def test_absent_store() -> None:
    assert _judge(exists=False)[0] is Found.ABSENT


def test_too_old_store_is_invalid_with_its_age() -> None:
    found, reason = _judge(last_update=NOW - timedelta(days=2))
    assert found is Found.INVALID and "2.0d" in reason and "1.0d" in reason


def test_no_validity_age_never_expires() -> None:
    assert _judge(last_update=NOW - timedelta(days=900), max_age=None)[0] is Found.VALID


def test_changed_configuration_is_invalid_and_named() -> None:
    found, reason = _judge(fingerprint={**FP, "extractor": "m:f"})
    assert found is Found.INVALID and "extractor" in reason


def test_fallen_off_retention_is_invalid() -> None:
    found, reason = _judge(fallen_off=[3])
    assert found is Found.INVALID and "[3]" in reason


@given(st.integers(min_value=0, max_value=10**7), st.integers(min_value=1, max_value=10**7))
def test_validity_is_age_against_max_age(age_s: int, max_s: int) -> None:
    found, _ = _judge(last_update=NOW - timedelta(seconds=age_s), max_age=timedelta(seconds=max_s))
    assert (found is Found.VALID) == (age_s <= max_s)


# ------------------------------------------------------------------------------------------ division

fractions = st.integers(min_value=1, max_value=16).flatmap(
    lambda x: st.integers(min_value=0, max_value=x - 1).map(lambda b: Fraction(b, x))
)


@given(fractions, fractions, st.integers(min_value=0, max_value=2**32 - 1))
def test_covers_means_every_key_of_the_other_is_held(a: Fraction, b: Fraction, h: int) -> None:
    if a.covers(b) and b.holds(h):
        assert a.holds(h)


@given(fractions, st.integers(min_value=1, max_value=4))
def test_a_split_is_covered_by_its_parent(parent: Fraction, k: int) -> None:
    for i in range(k):
        child = Fraction(parent.bucket + i * parent.factor, parent.factor * k)
        assert parent.covers(child)
    assert WHOLE.covers(parent)


@given(fractions)
def test_a_merge_is_covered_by_the_union_of_its_halves(whole: Fraction) -> None:
    halves = [Fraction(whole.bucket, whole.factor * 2), Fraction(whole.bucket + whole.factor, whole.factor * 2)]
    assert covered_by_union(whole, halves)
    assert not covered_by_union(whole, halves[:1])


@given(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=4), st.integers(0, 1000))
def test_classes_survive_an_expansion(root: int, k: int, key_partition_seed: int) -> None:
    """A key in partition p before an expansion N -> kN is in p + iN after it: the same class."""
    assert class_root(root * k, root if k > 1 else None) == root
    p = key_partition_seed % root
    for i in range(k):
        assert store_class(p + i * root, root) == store_class(p, root)


def test_class_root_refuses_a_non_multiple() -> None:
    with pytest.raises(ConfigError, match="multiplies"):
        class_root(6, 4)


def test_fraction_refuses_bad_bucket() -> None:
    with pytest.raises(ValueError):
        Fraction(3, 3)


# ------------------------------------------------------------------------------------------ bounded versions


def test_generation_is_sealed_when_every_partition_delivered_its_marker() -> None:
    g = Generations()
    assert serving_generation(Dataset.BOUNDED, g, [0, 1]) == -1
    g = g.after_marker(0)
    assert serving_generation(Dataset.BOUNDED, g, [0, 1]) == -1  # half a dataset is never served
    g = g.after_marker(1)
    assert serving_generation(Dataset.BOUNDED, g, [0, 1]) == 0
    g = g.after_marker(1).after_marker(1)
    assert serving_generation(Dataset.BOUNDED, g, [0, 1]) == 0
    assert Generations.from_json(g.to_json()) == g
    assert serving_generation(Dataset.UNBOUNDED, g, [0, 1]) == 0


@given(st.lists(st.integers(min_value=0, max_value=3), max_size=30))
def test_sealed_generation_never_goes_back(markers: list[int]) -> None:
    g, last = Generations(), -1
    for p in markers:
        g = g.after_marker(p)
        now = g.sealed(range(4))
        assert now >= last
        assert now == min(g.of(q) for q in range(4)) - 1
        last = now


# ------------------------------------------------------------------------------------------ CDC

changes = st.lists(
    st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]), st.one_of(st.none(), st.binary(min_size=1, max_size=3))),
    max_size=40,
)


@given(changes, st.integers(min_value=0, max_value=40))
def test_replaying_a_suffix_is_harmless(stream: list[tuple[bytes, bytes | None]], cut: int) -> None:
    """At-least-once delivery: re-applying the changes after any point gives the same store."""
    once = apply_changes({}, stream)
    cut = min(cut, len(stream))
    assert apply_changes(apply_changes({}, stream), stream[cut:]) == once


@given(changes)
def test_the_store_holds_each_keys_last_change(stream: list[tuple[bytes, bytes | None]]) -> None:
    state = apply_changes({}, stream)
    last: dict[bytes, bytes | None] = {}
    for k, v in stream:
        last[k] = v
    assert state == {k: v for k, v in last.items() if v is not None}


# ------------------------------------------------------------------------------------------ quality check


def test_compare_sample_reports_mismatches() -> None:
    verdict = compare_sample({b"a": b"1", b"b": None, b"c": b"3"}, {b"a": b"1", b"b": b"old", b"c": b"3"})
    assert not verdict.success and verdict.checked == 3 and verdict.mismatches == 1
    assert "b" in verdict.examples[0] and "nothing" in verdict.examples[0]
    assert compare_sample({b"a": b"1"}, {b"a": b"1"}).success


@given(st.lists(st.binary(max_size=3), max_size=30), st.integers(min_value=0, max_value=40))
def test_sample_keys_is_distinct_reproducible_and_sized(keys: list[bytes], size: int) -> None:
    s = sample_keys(keys, size, seed=7)
    assert s == sample_keys(keys, size, seed=7)
    assert len(s) == len(set(s)) == min(size, len(set(keys)))
    assert set(s) <= set(keys)
