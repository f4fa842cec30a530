"""Kinesis slots in the inputs' view: a slot still reading a closed parent holds its waiting children back."""

from __future__ import annotations

from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.observe.systems import _slots_view

CLICKS = SystemStream("kinesis", "clicks")


def test_a_slot_reading_a_closed_parent_is_held_and_every_shard_keeps_its_lineage() -> None:
    shards = {  # what KinesisSystem.lineage answers after shard 0 split into 2 and 3
        "shardId-000000000000": {"parents": [], "children": ["shardId-000000000002", "shardId-000000000003"],
                                 "open": False, "slot": 0, "state": "reading"},
        "shardId-000000000001": {"parents": [], "children": [], "open": True, "slot": 1, "state": "reading"},
        "shardId-000000000002": {"parents": ["shardId-000000000000"], "children": [], "open": True, "slot": None,
                                 "state": "waiting for parents"},
        "shardId-000000000003": {"parents": ["shardId-000000000000"], "children": [], "open": True, "slot": None,
                                 "state": "waiting for parents"},
    }  # fmt: skip
    held: dict[SystemStreamPartition, str] = {}
    view = _slots_view(CLICKS, {0: "pos-a", 1: "pos-b"}, shards, held)
    slot0 = SystemStreamPartition("kinesis", "clicks", 0)
    assert held == {
        slot0: "parent shard shardId-000000000000 not finished: children shardId-000000000002, "
        "shardId-000000000003 wait"
    }
    assert [(p["partition"], p["shards"], p["held"] is not None) for p in view["partitions"]] == [
        (0, ["shardId-000000000000"], True),
        (1, ["shardId-000000000001"], False),
    ]
    lineage = {s["shard"]: s for s in view["shards"]}
    assert lineage["shardId-000000000002"]["parents"] == ["shardId-000000000000"]
    assert lineage["shardId-000000000000"]["open"] is False and lineage["shardId-000000000000"]["slot"] == 0
    assert "time" in view["lag_unit"]


def test_a_finished_parent_holds_nothing() -> None:
    shards = {
        "shardId-000000000000": {"parents": [], "children": ["shardId-000000000002"], "open": False, "slot": 0,
                                 "state": "finished"},
        "shardId-000000000002": {"parents": ["shardId-000000000000"], "children": [], "open": True, "slot": 0,
                                 "state": "reading"},
    }  # fmt: skip
    held: dict[SystemStreamPartition, str] = {}
    view = _slots_view(CLICKS, {0: "pos"}, shards, held)
    assert held == {} and view["partitions"][0]["shards"] == ["shardId-000000000000", "shardId-000000000002"]
