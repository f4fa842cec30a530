"""Kinesis as its users know it, against the kinesis-mock emulator: shards with lineage, slots, a held slot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.observe.systems import inspect_inputs
from pipelines.storage.home import Home
from pipelines.systems.kinesis import KinesisSystem
from testbed.servers.kinesis_emulator import KinesisEmulator


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with KinesisEmulator() as url:
        yield url


def test_a_split_shows_the_lineage_and_the_slot_that_holds_the_children_back(endpoint: str, tmp_path: Path) -> None:
    settings = {"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": 100.0}
    home = Home(tmp_path / "home")
    system = KinesisSystem(settings, home)
    try:
        system.create("clicks", 1)
        system.produce("clicks", [(f"k{i}".encode(), b"v", None) for i in range(20)])
        start = system.describe("clicks").partitions[0].earliest  # a job that has read nothing of shard 0 yet
        assert system.split_shard("clicks", "shardId-000000000000") == ["shardId-000000000001", "shardId-000000000002"]
    finally:
        system.close()
    slot = SystemStreamPartition("kinesis", "clicks", 0)
    (view,), held = inspect_inputs(
        home, "clicks-job", [SystemStream("kinesis", "clicks")], {"kinesis": settings}, {slot: start}, timeout_s=30
    )
    assert view["reachable"] is True, view
    shards = {s["shard"]: s for s in view["shards"]}
    parent = shards["shardId-000000000000"]
    assert (parent["open"], parent["slot"], parent["state"]) == (False, 0, "reading")
    assert parent["children"] == ["shardId-000000000001", "shardId-000000000002"]
    for child in ("shardId-000000000001", "shardId-000000000002"):
        assert shards[child]["parents"] == ["shardId-000000000000"] and shards[child]["open"] is True
        assert (shards[child]["slot"], shards[child]["state"]) == (None, "waiting for parents")
    assert held == {
        slot: "parent shard shardId-000000000000 not finished: children shardId-000000000001, shardId-000000000002 wait"
    }
    assert view["partitions"] == [{"partition": 0, "checkpoint": start, "shards": ["shardId-000000000000"],
                                   "held": held[slot]}]  # fmt: skip
