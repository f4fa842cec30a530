"""The pure rules of keyed state: declarations, value checks, schema changes, bookkeeping, expiry, fractions."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core import state as rules
from pipelines.core.adjunct import Fraction
from pipelines.errors import ConfigError

pytestmark = pytest.mark.unit


def spec(columns: list[tuple[str, str]], **kwargs: object) -> rules.StateSpec:
    return rules.make_spec("totals", ", ".join(f"{n} {t}" for n, t in columns), columns, **kwargs)  # type: ignore[arg-type]


TOTALS = spec([("events", "bigint"), ("amount", "double"), ("name", "string"), ("at", "timestamp")])


def test_a_value_is_checked_column_by_column_and_missing_columns_are_null() -> None:
    check = rules.value_checker(TOTALS)
    assert check({"events": 3, "amount": 2}) == {"events": 3, "amount": 2.0, "name": None, "at": None}
    naive = dt.datetime(2026, 12, 1, 8, 0)
    assert check({"at": naive})["at"] == naive.replace(tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"events": "three"}, "column 'events' (bigint) needs a whole number"),
        ({"events": True}, "needs a whole number"),
        ({"events": 1 << 63}, "from -9223372036854775808 to 9223372036854775807"),
        ({"amount": "2"}, "needs a number"),
        ({"name": b"x"}, "needs a string"),
        ({"nope": 1}, "has no column 'nope'; its columns: events, amount, name, at"),
        ([1, 2], "a value must be a dict of its columns"),
    ],
)
def test_a_value_that_does_not_fit_says_which_column_and_why(value: object, says: str) -> None:
    with pytest.raises(rules.StateValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        rules.value_checker(TOTALS)(value)


def test_a_value_over_the_size_limit_is_refused_with_its_size() -> None:
    small = spec([("note", "string")], max_value_bytes=10)
    rules.value_checker(small)({"note": "x" * 10})
    with pytest.raises(rules.StateValueError, match="11 bytes, over the state's limit of 10"):
        rules.value_checker(small)({"note": "x" * 11})
    with pytest.raises(rules.StateValueError, match="over the state's limit"):
        rules.value_checker(small)({"note": "é" * 6})  # 12 bytes in UTF-8


def test_decimals_keep_their_scale_and_precision() -> None:
    money = rules.value_checker(spec([("price", "decimal(5,2)")]))
    assert money({"price": decimal.Decimal("12.5")})["price"] == decimal.Decimal("12.50")
    assert money({"price": 7})["price"] == decimal.Decimal("7.00")
    with pytest.raises(rules.StateValueError, match="at most 2 digits after the point"):
        money({"price": decimal.Decimal("1.234")})
    with pytest.raises(rules.StateValueError, match="at most 5 digits"):
        money({"price": decimal.Decimal("12345.6")})
    with pytest.raises(rules.StateValueError, match="a Decimal or a whole number"):
        money({"price": 1.5})


@pytest.mark.parametrize(
    ("columns", "says"),
    [
        ([("_count", "bigint")], "starts with '_'"),
        ([("key", "string")], "the row's own key column"),
        ([("tags", "array<string>")], "which a state cannot hold"),
    ],
)
def test_a_declaration_is_refused_for_columns_a_state_cannot_have(columns: list[tuple[str, str]], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        spec(columns)


def test_a_declaration_checks_its_ttl_and_limit() -> None:
    assert spec([("n", "bigint")], ttl="12h").ttl_s == 43200.0
    with pytest.raises(ConfigError, match="ttl must be a duration"):
        spec([("n", "bigint")], ttl="soon")
    with pytest.raises(ConfigError, match="max_value_bytes must be a whole number from 1 to"):
        spec([("n", "bigint")], max_value_bytes=0)
    assert rules.StateSpec.from_saved(TOTALS.to_dict()) == TOTALS


def test_a_schema_may_only_add_columns() -> None:
    wider = spec([("events", "bigint"), ("amount", "double"), ("name", "string"), ("at", "timestamp"), ("x", "int")])
    rules.check_evolution("j", [TOTALS], [wider])
    rules.check_evolution("j", [TOTALS], [TOTALS])
    with pytest.raises(ConfigError, match="drops or renames column 'at'"):
        rules.check_evolution("j", [TOTALS], [spec([("events", "bigint"), ("amount", "double"), ("name", "string")])])
    with pytest.raises(ConfigError, match="changes column 'events' from bigint to int"):
        rules.check_evolution(
            "j", [TOTALS], [spec([("events", "int"), ("amount", "double"), ("name", "string"), ("at", "timestamp")])]
        )
    with pytest.raises(ConfigError, match="drops state 'totals'"):
        rules.check_evolution("j", [TOTALS], [])


def test_every_applied_record_counts_on_its_row_and_names_itself_last() -> None:
    row = rules.applied(None, "events", 0, "7", now_us=100, segment=3)
    assert row[rules.RECORDS] == 1 and row[rules.HAS_VALUE] is False
    assert (row["_first_stream"], row["_first_partition"], row["_first_offset"]) == ("events", 0, "7")
    row = rules.applied(row, "events", 4, "2", now_us=200, segment=4)
    assert row[rules.RECORDS] == 2
    assert (row["_first_partition"], row["_first_offset"]) == (0, "7"), "the first stays the first"
    assert (row["_last_partition"], row["_last_offset"], row[rules.UPDATED_AT], row[rules.SEGMENT]) == (4, "2", 200, 4)


def test_a_record_at_or_before_the_last_applied_one_of_its_partition_was_applied() -> None:
    row = rules.applied(None, "events", 0, "10", now_us=1, segment=1)
    order = int
    assert rules.already_applied(row, "events", 0, "10", order)
    assert rules.already_applied(row, "events", 0, "9", order)
    assert not rules.already_applied(row, "events", 0, "11", order)
    assert not rules.already_applied(row, "events", 1, "3", order), "another partition's offsets are not comparable"
    assert not rules.already_applied(row, "clicks", 0, "3", order)


def test_a_row_expires_when_its_ttl_has_passed_by_the_batches_clock() -> None:
    assert not rules.expired(1_000_000, None, 10**12)
    assert not rules.expired(1_000_000, 2.0, 2_999_999)
    assert rules.expired(1_000_000, 2.0, 3_000_000)
    assert not rules.expired(None, 2.0, 10**12)


@given(st.integers(0, 2**32 - 1), st.integers(1, 64), st.integers(1, 64))
def test_a_key_written_at_one_factor_is_in_the_files_every_other_factor_reads(h: int, x: int, y: int) -> None:
    """The changes a task reads are those of buckets overlapping its own: never missing one of its keys."""
    assert rules.overlaps(Fraction(h % y, y), x, h % x)


@given(st.integers(1, 24), st.integers(1, 24), st.data())
def test_buckets_that_share_no_key_are_not_read(x: int, y: int, data: st.DataObject) -> None:
    b, c = data.draw(st.integers(0, x - 1)), data.draw(st.integers(0, y - 1))
    shared = any(h % x == b and h % y == c for h in range(x * y))
    assert rules.overlaps(Fraction(c, y), x, b) == shared


def test_a_split_reads_its_parents_cache_and_any_other_switch_its_share_from_the_home() -> None:
    assert rules.switch_reads(2, 4, 1000) == ("its parent's cached fraction (only the newest changes from the home)", 0)
    where, each = rules.switch_reads(4, 3, 1200)
    assert each == 400 and "the home" in where
    assert rules.switch_reads(4, 2, 1000)[1] == 500, "a merge's fraction is a union of two: built once"
