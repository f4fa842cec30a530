"""Coordination records on a real store (a local folder and SeaweedFS): leases judged by their beats, versions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipelines.storage.location import Location, local, parse
from pipelines.storage.objects import ObjectStore, store_for
from pipelines.storage.records import VersionedRecord, Watch, take
from testbed.servers.s3 import S3Server


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])  # S3: a server, so slow
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "local":
        return local(tmp_path / "records")
    server: S3Server = request.getfixturevalue("s3_server")
    return parse(f"s3://{server.create_bucket()}/records")


def _store(place: Location) -> ObjectStore:
    return store_for(place)


def test_a_beating_holder_is_alive_a_silent_one_dies_after_the_lease_and_one_waiter_takes_over(place: Location) -> None:
    store = _store(place)
    lease = take(store, place / "claim")
    assert lease is not None and lease.generation == 0
    assert take(store, place / "claim") is None, "held: a second taker gets nothing"
    watch = Watch(store, place / "claim", lease_s=1.0)
    assert watch.current() == 0
    for _ in range(3):  # beats keep it alive however long the watch looks
        lease.beat()
        assert not watch.expired(0)
        time.sleep(0.5)
    deadline = time.monotonic() + 10
    while not watch.expired(0):  # silent: dead after lease_s of the watcher's own clock
        assert time.monotonic() < deadline, "a silent holder is judged dead after its lease"
        time.sleep(0.1)
    first, second = watch.take_over(0), Watch(store, place / "claim", 1.0).take_over(0)
    assert (first is None) != (second is None), "exactly one waiter takes over"
    taker = first or second
    assert taker is not None and taker.generation == 1 and watch.current() == 1


def test_a_released_lease_is_taken_over_at_once(place: Location) -> None:
    store = _store(place)
    lease = take(store, place / "claim")
    assert lease is not None
    watch = Watch(store, place / "claim", lease_s=3600.0)
    assert not watch.expired(0)
    lease.release()
    assert watch.expired(0), "a released lease needs no waiting out"
    assert watch.take_over(0) is not None


def test_a_versioned_record_keeps_every_change_and_its_history(place: Location) -> None:
    store = _store(place)
    record = VersionedRecord(store, place / "doc")
    assert record.latest() == (0, {})
    record.update(lambda d: {**d, "partitions": 2})
    stale = VersionedRecord(store, place / "doc")
    record.update(lambda d: {**d, "expansions": [4]})
    assert stale.update(lambda d: None if d.get("partitions") == 2 else d) == {"partitions": 2, "expansions": [4]}
    assert record.latest() == (2, {"partitions": 2, "expansions": [4]})
    names = sorted(e.name for e in store.list(place / "doc"))
    assert names == ["0000000001.json", "0000000002.json"], "each change is a new version; none is rewritten"
