"""A Kinesis stream's retention period from a stream's own retention: whole hours from 24 h to 365 days."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.errors import ConfigError
from pipelines.systems.kinesis.admin import HOUR_MS, MAX_RETENTION_HOURS, retention_hours


@pytest.mark.parametrize(
    ("retention_ms", "hours"), [(None, 24), (24 * HOUR_MS, 24), (7 * 24 * HOUR_MS, 168), (8760 * HOUR_MS, 8760)]
)
def test_what_kinesis_keeps_is_asked_in_hours(retention_ms: int | None, hours: int) -> None:
    assert retention_hours(retention_ms) == hours


@pytest.mark.parametrize(
    ("retention_ms", "why"),
    [
        (-1, "never forever"),
        (23 * HOUR_MS, "got 23h"),
        (8761 * HOUR_MS, "got 8761h"),
        (25 * HOUR_MS + 60_000, "got 1501m"),
        (0, "retention_ms must be"),
        (True, "retention_ms must be"),
    ],
)
def test_what_kinesis_would_refuse_is_refused_first(retention_ms: int, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        retention_hours(retention_ms)


@given(st.integers(min_value=1, max_value=2 * MAX_RETENTION_HOURS * HOUR_MS))
def test_an_accepted_period_is_exactly_the_age_asked(retention_ms: int) -> None:
    try:
        hours = retention_hours(retention_ms)
    except ConfigError:
        assert retention_ms % HOUR_MS or not 24 <= retention_ms // HOUR_MS <= MAX_RETENTION_HOURS
    else:
        assert hours * HOUR_MS == retention_ms and 24 <= hours <= MAX_RETENTION_HOURS
