"""The job YAML's ``stores:`` section: what is accepted, and every refusal names the setting and the fix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines.adjunct.config import parse_stores, validate_stores
from pipelines.core.adjunct import Dataset, Partitioning, Persistence
from pipelines.core.positions import Expansion
from pipelines.core.ssp import SystemStream
from pipelines.errors import ConfigError
from pipelines.systems.base import PartitionMetadata, StreamMetadata

EVENTS = SystemStream("deltalog", "events")


def test_defaults_and_full_settings() -> None:
    (plain,) = parse_stores({"customers": {"input": "customers"}})
    assert plain.input == SystemStream("deltalog", "customers")
    assert (plain.partitioning, plain.persistence, plain.dataset) == (
        Partitioning.BROADCAST,
        Persistence.PERSISTENT,
        Dataset.UNBOUNDED,
    )
    assert plain.bootstrap is False and plain.valid_for is None and plain.extractor == "default"
    (full,) = parse_stores(
        {
            "c": {
                "input": {"system": "kafka", "stream": "cdc.customers"},
                "extractor": "tests.integration.adjunct.extractors:upper",
                "partitioning": "partitioned",
                "persistence": "memory",
                "bootstrap": True,
                "valid_for": "12h",
                "dataset": "bounded",
            }
        }
    )
    assert full.partitioned and full.bounded and full.valid_for == timedelta(hours=12)
    assert parse_stores(None) == ()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"input": "c", "partitoning": "broadcast"}, "did you mean 'partitioning'"),
        ({"partitioning": "broadcast"}, "stores.customers: missing required field 'input' (the AD stream"),
        ({"input": {"system": "kafak", "stream": "c"}}, "did you mean 'kafka'"),
        ({"input": "c", "partitioning": "sharded"}, "must be one of broadcast, partitioned"),
        ({"input": "c", "extractor": "no_such_module:fn"}, "cannot import 'no_such_module'"),
        ({"input": "c", "extractor": "json:no_such_function"}, "has no callable 'no_such_function'"),
        ({"input": "c", "extractor": "not-a-path"}, "package.module:function"),
        ({"input": "c", "bootstrap": "yes"}, "true or false"),
        ({"input": "c", "valid_for": "soon"}, "duration"),
        pytest.param(
            {"input": "c", "valid_for": 10**400},
            "stores.customers: valid_for must be shorter than 999999999 days, got <a number of about 401 digits>",
            id="valid_for-10**400",
        ),
    ],
)
def test_refusals_name_the_setting(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_stores({"customers": settings}, "job.yaml")


def test_a_store_may_not_read_a_main_input() -> None:
    with pytest.raises(ConfigError, match="never to the process function"):
        parse_stores({"c": {"input": "events"}}, "job.yaml", [EVENTS])


def _meta(stream: str, partitions: int, expanded_from: int | None = None) -> StreamMetadata:
    parts = {p: PartitionMetadata(p, "0", "0") for p in range(partitions)}
    at = datetime(2026, 1, 1, tzinfo=UTC)
    expansions = [Expansion(expanded_from, partitions, {}, at)] if expanded_from else []
    return StreamMetadata("deltalog", stream, parts, expansions)


def test_a_partitioned_store_must_be_co_partitioned() -> None:
    stores = parse_stores({"c": {"input": "customers", "partitioning": "partitioned"}})
    metas = {"events": _meta("events", 4), "customers": _meta("customers", 2)}
    with pytest.raises(ConfigError, match="2 partitions against 4"):
        validate_stores(stores, [EVENTS], lambda s: metas[s.stream])
    metas["customers"] = _meta("customers", 4)
    assert set(validate_stores(stores, [EVENTS], lambda s: metas[s.stream])) == {"c"}
    broadcast = parse_stores({"c": {"input": "customers"}})
    metas["customers"] = _meta("customers", 3)
    assert set(validate_stores(broadcast, [EVENTS], lambda s: metas[s.stream])) == {"c"}


def test_a_partitioned_store_needs_the_same_count_before_expansion() -> None:
    stores = parse_stores({"c": {"input": "customers", "partitioning": "partitioned"}})
    metas = {"events": _meta("events", 4, expanded_from=2), "customers": _meta("customers", 4)}
    with pytest.raises(ConfigError, match="before its first expansion"):
        validate_stores(stores, [EVENTS], lambda s: metas[s.stream])
