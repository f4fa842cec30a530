"""The job YAML's ``start``: the two words, a time with its zone, and what is refused before any system is asked."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.start import parse_start, start_time_ms
from pipelines.errors import ConfigError


@pytest.mark.parametrize("word", ["earliest", "latest", " latest "])
def test_the_two_words_stay_words_and_have_no_time(word: str) -> None:
    assert parse_start(word) == word.strip()
    assert start_time_ms(parse_start(word)) is None


@pytest.mark.parametrize(
    ("given_", "canonical", "ms"),
    [
        ("2026-11-27T08:00:00Z", "2026-11-27T08:00:00.000Z", 1795766400000),
        ("2026-11-27T09:00:00+01:00", "2026-11-27T08:00:00.000Z", 1795766400000),
        ("2026-11-27T08:00:00.1234Z", "2026-11-27T08:00:00.123Z", 1795766400123),
        ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000Z", 0),
    ],
)
def test_a_time_with_its_zone_becomes_utc_to_the_millisecond(given_: str, canonical: str, ms: int) -> None:
    assert parse_start(given_) == canonical
    assert start_time_ms(canonical) == ms
    assert parse_start(canonical) == canonical, "the canonical form reads back as itself (saved configs)"


def test_an_unquoted_yaml_timestamp_is_taken_as_the_time_it_names() -> None:
    loaded = yaml.safe_load("start: 2026-11-27T09:00:00+01:00")["start"]
    assert isinstance(loaded, datetime)
    assert parse_start(loaded) == "2026-11-27T08:00:00.000Z"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2026-11-27T08:00:00", "has no time zone"),
        ("2026-11-27", "has no time zone"),
        (datetime(2026, 11, 27, 8), "has no time zone"),
        (date(2026, 11, 27), "is a date, not a time"),
        ("1969-12-31T23:59:59Z", "before 1970"),
        ("newest", "is not a start"),
        ("lastest", "(did you mean 'latest'?)"),
        ("LATEST", "is not a start"),
        ("", "is not a start"),
        (0, "is not a start"),
        (None, "is not a start"),
        (["latest"], "is not a start"),
        (True, "is not a start"),
        ("9999-12-31T23:59:59-14:00", "is after 9999-12-31T23:59:59Z, the last time a timestamp can hold"),
        (datetime(9999, 12, 31, 20, tzinfo=timezone(timedelta(hours=-5))), "is after 9999-12-31T23:59:59Z"),
        pytest.param("x" * 5000, "... (5,002 characters) is not a start", id="5000-characters"),
    ],
)
def test_anything_else_is_refused_saying_why(value: object, words: str) -> None:
    with pytest.raises(ConfigError, match=r"^start: ") as info:
        parse_start(value)
    assert words in str(info.value)


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)))
def test_any_time_round_trips_through_its_canonical_form_to_the_millisecond(when: datetime) -> None:
    """Written in any zone, a time means the same instant, cut (not rounded) to the millisecond as Kafka's are."""
    canonical = parse_start(when.astimezone(timezone(timedelta(hours=-7))).isoformat())
    assert parse_start(canonical) == canonical
    assert start_time_ms(canonical) == (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
