"""``records()``: the per-record path's fast way of building ``Record`` makes the very objects ``Record(...)`` does."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.jobs.process import INPUT_COLUMNS, Record, records

rows = st.lists(
    st.tuples(
        st.text(max_size=5),
        st.integers(0, 1 << 20),
        st.integers(0, 1 << 40).map(str),
        st.one_of(st.none(), st.binary(max_size=8)),
        st.binary(max_size=8),
        st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))),
        st.one_of(st.none(), st.text(max_size=5)),
    ),
    max_size=20,
)


def test_records_fill_every_field_of_record() -> None:
    assert tuple(f.name for f in dataclasses.fields(Record)) == INPUT_COLUMNS


@given(rows)
def test_records_equal_what_record_makes(values: list[tuple]) -> None:
    made = list(records(*map(list, zip(*values, strict=True)))) if values else []
    expected = [Record(**dict(zip(INPUT_COLUMNS, row, strict=True))) for row in values]
    assert made == expected
    assert [hash(r) for r in made] == [hash(r) for r in expected]
    assert all(type(r) is Record for r in made)


def test_a_record_made_by_records_stays_frozen() -> None:
    (record,) = records(["s"], [0], ["7"], [b"k"], [b"v"], [datetime(2026, 1, 1, tzinfo=UTC)], [None])
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.value = b"changed"  # type: ignore[misc]
    assert record.offset == "7" and record.key == b"k"


def test_columns_of_different_lengths_are_an_error() -> None:
    with pytest.raises(ValueError):
        list(records(["s", "s"], [0], ["1"], [None], [b""], [None], [None]))
