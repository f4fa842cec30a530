"""Seeded faults on pure pandas frames: each check catches its fault and names the key and offset."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pipelines.errors import ConfigError
from pipelines.quality.checks import annotate, verify_rows
from pipelines.quality.synthetic import synthetic_window

FACTOR = 4


@pytest.fixture(scope="module")
def clean() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return synthetic_window(400, partitions=2, factor=FACTOR, keys=20, batch=50, seed=7)


def _both(expected, rows, dead, sequence=None):
    """The per-key loop of verify_rows and the vectorized flags behind GX must agree on every count."""
    a = verify_rows(expected, rows, dead, lambda v: FACTOR, sequence)
    b = annotate(expected, rows, dead, lambda v: FACTOR, sequence).verdict()
    for attr in ("lost", "duplicates", "order_violations", "misrouted", "rows", "records_expected"):
        assert getattr(a, attr) == getattr(b, attr), attr
    return a, b


@pytest.mark.parametrize("factor", [1, 4])
def test_clean_window_passes(factor: int) -> None:
    expected, rows, dead = synthetic_window(300, partitions=2, factor=factor, keys=10, batch=40)
    for sequence in (None, "seq"):
        assert verify_rows(expected, rows, dead, lambda v: factor, sequence).ok
        assert annotate(expected, rows, dead, lambda v: factor, sequence).verdict().ok


def test_dropped_row_is_lost_and_named_by_offset(clean) -> None:
    expected, rows, dead = clean
    victim = rows.iloc[123]
    for v in _both(expected, rows.drop(index=123), dead):
        assert (v.lost, v.duplicates, v.order_violations, v.misrouted) == (1, 0, 0, 0)
        assert v.examples["lost"] == [f"events/{victim['partition']}@{victim['offset']}"]
        assert "FAIL" in v.summary() and f"@{victim['offset']}" in v.summary()


def test_a_dead_letter_accounts_for_its_record(clean) -> None:
    expected, rows, dead = clean
    moved = rows.iloc[[5]][dead.columns.drop("error")].assign(error="ValueError")
    for v in _both(expected, rows.drop(index=5), pd.concat([dead, moved])):
        assert v.ok and v.dead_letters == 1


def test_duplicated_row_is_named_by_key_and_offset(clean) -> None:
    expected, rows, dead = clean
    twice = pd.concat([rows, rows.iloc[[42]].assign(batch_id=rows["batch_id"].max() + 1)], ignore_index=True)
    key, p, o = rows.iloc[42][["event_key", "partition", "offset"]]
    for v in _both(expected, twice, dead):
        assert v.duplicates == 1 and v.lost == 0
        assert v.examples["duplicated"] == [f"key {key} at events/{p}@{o}"]


def _swap_two_of_one_key(rows: pd.DataFrame) -> tuple[pd.DataFrame, str, list[str]]:
    key = rows["event_key"].iloc[0]
    idx = rows.index[rows["event_key"] == key][:2]
    swapped = rows.copy()
    order_cols = ["batch_id", "task_seq"]
    swapped.loc[idx[0], order_cols], swapped.loc[idx[1], order_cols] = (
        rows.loc[idx[1], order_cols].to_numpy(),
        rows.loc[idx[0], order_cols].to_numpy(),
    )
    return swapped, key, [rows.loc[i, "offset"] for i in idx]


def test_two_records_of_one_key_swapped_break_order(clean) -> None:
    expected, rows, dead = clean
    swapped, key, (first, second) = _swap_two_of_one_key(rows)
    p = rows.loc[rows["event_key"] == key, "partition"].iloc[0]
    for v in _both(expected, swapped, dead):
        assert v.order_violations == 1 and not v.ok
        assert v.examples["out of order"] == [f"key {key}: {p}@{second} then {p}@{first}"]
    for v in _both(expected, swapped, dead, "seq"):  # the producer's per-key seq sees it too
        assert v.order_violations == 1
        assert v.examples["out of order"] == [f"key {key}: seq 1 then seq 0"]


def test_record_routed_to_the_wrong_bucket_is_named(clean) -> None:
    expected, rows, dead = clean
    wrong = rows.copy()
    i = 77
    right = int(rows.loc[i, "key_bucket"])
    bad = (right + 1) % FACTOR
    wrong.loc[i, "key_bucket"] = bad
    wrong.loc[i, "virtual_task"] = f"Partition {rows.loc[i, 'partition']}-{bad}-{FACTOR}"
    key, p, o = rows.loc[i, ["event_key", "partition", "offset"]]
    for v in _both(expected, wrong, dead):
        assert v.misrouted == 1
        assert v.examples["misrouted"] == [f"key {key} at {p}@{o} in Partition {p}-{bad}-{FACTOR} (bucket {bad})"]


def test_a_task_that_processed_another_bucket_is_misrouted(clean) -> None:
    expected, rows, dead = clean
    wrong = rows.copy()
    other = (int(rows.loc[3, "key_bucket"]) + 1) % FACTOR
    wrong.loc[3, "virtual_task"] = f"Partition {rows.loc[3, 'partition']}-{other}-{FACTOR}"  # bucket column right
    for v in _both(expected, wrong, dead):
        assert v.misrouted == 1


def test_saved_suites_match_the_code() -> None:
    import great_expectations as gx

    from pipelines.quality.expectations import INCLUDE, build_suites, suite_json

    gx.get_context(mode="ephemeral")
    for asset, suite in build_suites().items():
        saved = json.loads((INCLUDE / f"{asset}.json").read_text(encoding="utf-8"))
        assert saved == json.loads(json.dumps(suite_json(suite))), "rerun python -m pipelines.quality.expectations"


def test_keyless_records_are_not_judged_for_order_and_the_verdict_says_so() -> None:
    expected, rows, dead = synthetic_window(300, partitions=2, factor=1, keys=10, batch=40, seed=3)
    keyless = rows["event_key"] == "key-3"
    rows = rows.copy()
    rows.loc[keyless, "key"] = None
    rows.loc[keyless, "seq"] = rows.loc[keyless, "seq"].to_numpy()[::-1]  # out of order, if it had a key
    for sequence in (None, "seq"):
        judged = (
            verify_rows(expected, rows, dead, lambda v: 1, sequence),
            annotate(expected, rows, dead, lambda v: 1, sequence).verdict(),
        )
        for v in judged:
            assert v.ok and v.order_violations == 0
            assert v.keyless == int(keyless.sum()) > 0
            assert f"{v.keyless} records have no key: no per-key order to keep" in v.summary()
    keyed = rows.copy()
    keyed.loc[keyless, "key"] = b"key-3"
    assert not verify_rows(expected, keyed, dead, lambda v: 1, "seq").ok, "with their key, the same rows fail"


@pytest.mark.parametrize(
    ("sequence", "reason"),
    [
        ("nocol", "is not a column of the job's output; its columns: "),
        ("", "is not a column of the job's output"),
        ("offset", "is not a column of the job's output"),  # lineage, not a per-key sequence
        ("event_key", "must be a column of whole numbers"),
    ],
)
def test_a_sequence_that_is_no_whole_number_column_of_the_output_is_refused_before_any_check(
    clean, sequence: str, reason: str
) -> None:
    expected, rows, dead = clean
    for check in (verify_rows, annotate):
        with pytest.raises(ConfigError, match=reason):
            check(expected, rows, dead, lambda v: FACTOR, sequence)
