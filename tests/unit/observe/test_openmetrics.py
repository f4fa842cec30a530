"""Signals to OpenMetrics (``observe.openmetrics``): what is unknown is left out, an unreadable job is flagged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from pipelines.observe.openmetrics import GAUGES, PREFIX, JobSignals, exposition

pytestmark = pytest.mark.unit


def parsed(text: str) -> dict[str, dict[str, float]]:
    """``metric name -> {job: value}``, through Prometheus' OpenMetrics parser (which refuses a malformed text)."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, {})[s.labels["job"]] = s.value
    return found


def test_an_unknown_signal_is_left_out_and_an_unreadable_job_is_flagged_beside_the_others() -> None:
    good = JobSignals("orders", 3, 4, 8, True, True, False, lag_records=120, records_per_second=55.5)
    broken = JobSignals("broken", 0, 0, 0, False, False, False, error="DamagedTableError: no log")
    got = parsed(exposition([good, broken]))
    assert got[PREFIX + "read_error"] == {"orders": 0, "broken": 1}
    assert got[PREFIX + "lag_records"] == {"orders": 120} and got[PREFIX + "virtual_tasks"] == {"orders": 8}
    assert got[PREFIX + "input_records_per_second"] == {"orders": 55.5}
    assert got[PREFIX + "driver_up"] == {"orders": 1} and got[PREFIX + "driver_expected"] == {"orders": 1}
    assert PREFIX + "lag_seconds" not in got and PREFIX + "last_switch_downtime_seconds" not in got


@given(
    st.lists(
        st.from_regex(r"[A-Za-z0-9._-]{1,30}", fullmatch=True).filter(lambda n: n not in (".", "..")),
        unique=True,
        max_size=5,
    )
)
def test_every_job_name_the_platform_allows_comes_back_from_prometheus_parser_as_itself(names: list[str]) -> None:
    signals = [JobSignals(n, 1, 2, 4, False, True, False, lag_records=i) for i, n in enumerate(names)]
    got = parsed(exposition(signals))
    assert got.get(PREFIX + "lag_records", {}) == {n: i for i, n in enumerate(names)}
    assert got.get(PREFIX + "read_error", {}) == dict.fromkeys(names, 0)
    assert {name for name in got} <= {PREFIX + g[0] for g in GAUGES} | {PREFIX + "read_error"}
