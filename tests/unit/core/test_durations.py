"""One duration grammar: short units, Spark's unit words, or seconds; refused with one short line otherwise."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.durations import DURATION_PATTERN, parse_duration, spark_interval
from pipelines.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("15m", 900),
        ("12h", 43200),
        ("7d", 604800),
        ("2w", 1209600),
        ("500ms", 0.5),
        (5, 5),
        ("5", 5),
        ("1 second", 1),
        ("500 milliseconds", 0.5),
        ("2 Minutes", 120),
        ("interval 1 hour", 3600),
        ("INTERVAL 3 days", 259200),
        ("15 min", 900),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(
    "bad",
    [
        "soon",
        "-3s",
        0,
        True,
        "1y",
        "9999999999999d",
        1e300,
        "٣s",
        float("nan"),
        float("inf"),
        pytest.param(10**400, id="10**400"),
        pytest.param("9" * 5000, id="5000-digits"),
    ],
)
def test_parse_duration_refuses(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^stores\.c\.valid_for must be (a duration|positive|shorter)") as info:
        parse_duration(bad, "stores.c.valid_for")
    assert len(str(info.value)) < 200  # one short line, however long what was given


def test_a_duration_too_large_for_a_float_is_refused_as_too_long() -> None:
    """``valid_for: 10**400`` in a job's YAML ended ``job create`` with float()'s OverflowError."""
    with pytest.raises(ConfigError) as info:
        parse_duration(10**400, "valid_for")
    assert str(info.value) == "valid_for must be shorter than 999999999 days, got <a number of about 401 digits>"
    with pytest.raises(ConfigError, match=r"^valid_for must be shorter than 999999999 days, got inf$"):
        parse_duration(float("inf"), "valid_for")


def test_zero_is_a_duration_only_where_it_is_asked_for() -> None:
    assert parse_duration("0 seconds", "trigger_interval", zero=True).total_seconds() == 0
    with pytest.raises(ConfigError, match=r"^ttl must be positive, got '0s'$"):
        parse_duration("0s", "ttl")
    with pytest.raises(ConfigError, match="zero or more"):
        parse_duration(-1, "trigger_interval", zero=True)


@pytest.mark.parametrize(
    ("written", "spark"),
    [("1 second", "1000 milliseconds"), ("0 seconds", "0 milliseconds"), ("2m", "120000 milliseconds")],
)
def test_spark_gets_whole_milliseconds_whatever_form_was_written(written: str, spark: str) -> None:
    assert spark_interval(written) == spark


@given(st.integers(0, 10**6), st.sampled_from(["ms", "s", "m", "h", "d", "w", " seconds", " Minutes", " hour"]))
def test_the_pattern_is_the_parser(number: int, unit: str) -> None:
    """The JSON schema publishes DURATION_PATTERN: what it accepts, the parser accepts, and the other way round."""
    import re

    text = f"{number}{unit}"
    assert re.match(DURATION_PATTERN, text) is not None
    assert parse_duration(text, zero=True).total_seconds() >= 0
