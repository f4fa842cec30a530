"""Adjunct stores on the embedded log with real Delta: bootstrap, CDC, lookups, recovery, rescale, versions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.adjunct.checkpoints import checkpoint_rows, latest_store_checkpoints
from pipelines.adjunct.config import parse_stores
from pipelines.adjunct.extract import end_of_dataset_record
from pipelines.adjunct.ingest import AdjunctStores
from pipelines.adjunct.local import LocalEngine
from pipelines.adjunct.views import task_stores, view_at
from pipelines.core.adjunct import Action, Found, Fraction, Start
from pipelines.core.hashing import key_hash
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from pipelines.systems.registry import open_system

JOB = "enrich"


@pytest.fixture
def log(home: Home) -> Iterator[DeltaLog]:
    system = open_system("deltalog", home)
    yield system  # type: ignore[misc]
    system.close()


def stores(**settings: object) -> list:
    raw = {"input": "customers", **settings}
    return list(parse_stores({"customers": raw}))


def produce(log: DeltaLog, pairs: list[tuple[bytes, bytes]]) -> None:
    log.produce("customers", [(k, v, None) for k, v in pairs])


def open_stores(home: Home, log: DeltaLog, configs: list, **kw: object) -> AdjunctStores:
    return AdjunctStores.open(home, JOB, configs, {"deltalog": log}, **kw)  # type: ignore[arg-type]


def lookup(home: Home, configs: list, batch, tmp: Path, keys: list[bytes], **task: object) -> list[bytes | None]:
    views = task_stores(home, JOB, configs, batch, local_dir=str(tmp / "local"), **task)  # type: ignore[arg-type]
    return views["customers"].get_many(keys).to_pylist()


def test_bootstrap_reads_to_the_end_taken_at_open_then_serves_upserts_and_deletes(
    home: Home, log: DeltaLog, tmp_path: Path
) -> None:
    log.create("customers", 2)
    produce(log, [(f"c{i}".encode(), f"v{i}".encode()) for i in range(50)])
    configs = stores(bootstrap=True, batch_records=7)  # several segments per bootstrap
    ad = open_stores(home, log, configs)
    assert ad.opened("customers").recovery.start is Start.BOOTSTRAP
    produce(log, [(b"late", b"x")])  # after the open: not part of the bootstrap target
    done = ad.bootstrap()
    assert done["customers"].changes == 50
    batch = ad.current()
    assert lookup(home, configs, batch, tmp_path, [b"c0", b"c49", b"late", b"none"]) == [b"v0", b"v49", None, None]

    produce(log, [(b"c0", b"new"), (b"c1", b"")])  # an upsert and a tombstone (empty value)
    batch = ad.ingest()
    got = lookup(home, configs, batch, tmp_path, [b"c0", b"c1", b"late", b"c2"])
    assert got == [b"new", None, b"x", b"v2"]
    assert ad.state("customers").total_changes == 53
    ad.close()


def test_a_store_whose_stream_is_made_again_stops_instead_of_skipping_its_changes(
    home: Home, log: DeltaLog, tmp_path: Path
) -> None:
    """The customers stream deleted and created again while the job was down: the store's position stands past the
    new stream's end. Ingesting on would wait there and skip the new stream's changes below it, serving stale
    lookups without a word; it stops, naming the store, the partition, its end and the store's position."""
    import shutil

    from pipelines.errors import InputRewoundError

    log.create("customers", 1)
    produce(log, [(f"c{i}".encode(), f"v{i}".encode()) for i in range(20)])
    configs = stores(persistence="persistent", bootstrap=False)
    ad = open_stores(home, log, configs)
    batch = ad.ingest()
    assert ad.state("customers").positions == {0: "20"}
    ad.close()

    shutil.rmtree(log.path("customers"))
    made_again = open_system("deltalog", home)
    try:
        made_again.create("customers", 1)
        produce(made_again, [(b"c0", b"renamed")])
        again = _restart(home, made_again, configs, batch)
        said = r"^stream 'customers' partition 0 ends at 1, before the position of store 'customers' at 20: "
        with pytest.raises(InputRewoundError, match=said):
            again.ingest()
        assert again.state("customers").positions == {0: "20"}, "the store did not move"
        again.close()
    finally:
        made_again.close()


def test_a_view_keeps_its_version_while_the_driver_ingests(home: Home, log: DeltaLog, tmp_path: Path) -> None:
    log.create("customers", 1)
    produce(log, [(b"k", b"1")])
    configs = stores(bootstrap=True)
    ad = open_stores(home, log, configs)
    first = ad.ingest()
    view = task_stores(home, JOB, configs, first, local_dir=str(tmp_path))["customers"]
    produce(log, [(b"k", b"2")])
    second = ad.ingest()
    assert view.get(b"k") == b"1" and view.version == first["customers"]
    assert task_stores(home, JOB, configs, second, local_dir=str(tmp_path))["customers"].get("k") == b"2"
    assert second["customers"].seq > first["customers"].seq


def test_a_fresh_executor_rebuilds_from_the_snapshot_plus_tail(home: Home, log: DeltaLog, tmp_path: Path) -> None:
    log.create("customers", 2)
    produce(log, [(f"c{i}".encode(), b"a") for i in range(30)])
    configs = stores(bootstrap=True)
    ad = open_stores(home, log, configs)
    ad.bootstrap()  # compacts: a snapshot at the bootstrap's end
    produce(log, [(b"c3", b"b"), (b"c4", b"")])
    batch = ad.ingest()
    fresh = LocalEngine(tmp_path / "fresh")
    view = view_at(fresh, home, JOB, configs[0], batch["customers"])
    assert view.get_many([b"c3", b"c4", b"c5"]).to_pylist() == [b"b", None, b"a"]
    assert fresh.builds == 1  # one base built from snapshot + tail, no re-read of the stream


def _restart(home: Home, log: DeltaLog, configs: list, batch, **kw: object) -> AdjunctStores:
    rows = checkpoint_rows(JOB, configs, batch, batch_id=1)
    return open_stores(home, log, configs, checkpoints=latest_store_checkpoints(rows), **kw)


@pytest.mark.parametrize("bootstrap", [True, False])
@pytest.mark.parametrize("persistence", ["persistent", "memory"])
def test_recovery_store_absent(home: Home, log: DeltaLog, tmp_path: Path, persistence: str, bootstrap: bool) -> None:
    log.create("customers", 1)
    produce(log, [(b"a", b"1")])
    ad = open_stores(home, log, stores(persistence=persistence, bootstrap=bootstrap))
    opened = ad.opened("customers")
    assert opened.found is Found.ABSENT and opened.recovery.action is Action.CREATE
    assert opened.recovery.start is (Start.BOOTSTRAP if bootstrap else Start.LAST_OFFSET)
    assert ad.pending_bootstrap() == (["customers"] if bootstrap else [])


@pytest.mark.parametrize("bootstrap", [True, False])
@pytest.mark.parametrize("persistence", ["persistent", "memory"])
def test_recovery_store_present_and_valid(
    home: Home, log: DeltaLog, tmp_path: Path, persistence: str, bootstrap: bool
) -> None:
    log.create("customers", 1)
    produce(log, [(b"a", b"1")])
    configs = stores(persistence=persistence, bootstrap=True)
    first = open_stores(home, log, configs)
    batch = first.ingest()
    incarnation = batch["customers"].incarnation
    produce(log, [(b"b", b"2")])
    configs = stores(persistence=persistence, bootstrap=bootstrap)
    ad = _restart(home, log, configs, batch)
    opened = ad.opened("customers")
    assert opened.found is Found.VALID
    batch = ad.ingest()
    served = lookup(home, configs, batch, tmp_path, [b"a", b"b"])
    if persistence == "persistent":  # continue from last offset on the same store
        assert opened.recovery.action is Action.KEEP and batch["customers"].incarnation == incarnation
        assert ad.state("customers").total_changes == 2  # "a" was not read again
        assert served == [b"1", b"2"]
    else:  # a memory store is re-created; bootstrap if marked, else from the job's checkpoint
        assert opened.recovery.action is Action.RECREATE and batch["customers"].incarnation != incarnation
        expected = Start.BOOTSTRAP if bootstrap else Start.LAST_OFFSET
        assert opened.recovery.start is expected
        # bootstrap re-reads "a"; from the checkpoint "a" is not re-read, so it is gone from a memory store
        assert served == ([b"1", b"2"] if bootstrap else [None, b"2"])


@pytest.mark.parametrize("bootstrap", [True, False])
@pytest.mark.parametrize("persistence", ["persistent", "memory"])
def test_recovery_store_present_but_invalid(
    home: Home, log: DeltaLog, tmp_path: Path, persistence: str, bootstrap: bool
) -> None:
    log.create("customers", 1)
    produce(log, [(b"a", b"1")])
    configs = stores(persistence=persistence, bootstrap=True, valid_for="1h")
    batch = open_stores(home, log, configs).ingest()
    produce(log, [(b"b", b"2")])
    configs = stores(persistence=persistence, bootstrap=bootstrap, valid_for="1h")
    rows = checkpoint_rows(JOB, configs, batch, batch_id=1)
    later = pa.Table.from_pylist(rows).to_pylist()[0]["written_at"] + timedelta(hours=2)
    ad = open_stores(home, log, configs, checkpoints=latest_store_checkpoints(rows), now=later)
    opened = ad.opened("customers")
    assert opened.found is Found.INVALID and "older than its validity age" in opened.reason
    assert opened.recovery.action is Action.RECREATE
    assert opened.recovery.start is (Start.BOOTSTRAP if bootstrap else Start.LAST_OFFSET)
    batch = ad.ingest()
    expected_a = b"1" if bootstrap else None  # a forced bootstrap re-reads "a"; the last offset is past it
    assert lookup(home, configs, batch, tmp_path, [b"a", b"b"]) == [expected_a, b"2"]


def test_partitioned_store_serves_a_tasks_own_keys_across_a_rescale(home: Home, log: DeltaLog, tmp_path: Path) -> None:
    log.create("customers", 2)
    keys = [f"c{i}".encode() for i in range(40)]
    produce(log, [(k, b"v" + k) for k in keys])
    configs = stores(partitioning="partitioned", bootstrap=True)
    ad = open_stores(home, log, configs)
    batch = ad.ingest()
    where = {k: p for p, records in _partitions(log).items() for k in records}

    def served(partition: int, bucket: int | None, factor: int) -> dict[bytes, bytes]:
        got = lookup(home, configs, batch, tmp_path, keys, partitions=[partition], bucket=bucket, factor=factor)
        return {k: v for k, v in zip(keys, got, strict=True) if v is not None}

    for factor in (1, 2, 4, 2):  # split, split again, merge back
        for p in (0, 1):
            for b in range(factor):
                want = {k: b"v" + k for k in keys if where[k] == p and key_hash(k, "") % factor == b}
                assert served(p, b if factor > 1 else None, factor) == want


def _partitions(log: DeltaLog) -> dict[int, list[bytes]]:
    meta = log.describe("customers")
    out: dict[int, list[bytes]] = {}
    for p, m in meta.partitions.items():
        out[p] = log.read("customers", p, m.earliest, m.end).records["key"].to_pylist()
    return out


def test_partitioned_store_follows_an_expansion(home: Home, log: DeltaLog, tmp_path: Path) -> None:
    log.create("customers", 2)
    produce(log, [(b"k1", b"old")])
    configs = stores(partitioning="partitioned", bootstrap=True)
    ad = open_stores(home, log, configs)
    ad.ingest()
    log.expand("customers", 4)
    produce(log, [(b"k1", b"new"), (b"k2", b"two")])
    batch = ad.ingest()
    root = batch["customers"].root
    assert root == 2 and set(batch["customers"].positions) == {0, 1, 2, 3}
    found = {}
    for p in range(4):  # each task sees a key in the class of its partitions, whichever side of the expansion
        got = lookup(home, configs, batch, tmp_path, [b"k1", b"k2"], partitions=[p])
        for k, v in zip([b"k1", b"k2"], got, strict=True):
            if v is not None:
                found.setdefault(k, set()).add(v)
    assert found == {b"k1": {b"new"}, b"k2": {b"two"}}


def test_bounded_dataset_switches_versions_whole(home: Home, log: DeltaLog, tmp_path: Path) -> None:
    log.create("customers", 1)
    configs = stores(dataset="bounded", bootstrap=True)
    produce(log, [(b"a", b"1"), (b"b", b"1")])
    ad = open_stores(home, log, configs)
    batch = ad.ingest()
    assert batch["customers"].generation == -1  # no sealed version: nothing is served, not half of one
    assert lookup(home, configs, batch, tmp_path, [b"a"]) == [None]
    log.produce("customers", [end_of_dataset_record()])
    produce(log, [(b"a", b"2")])  # the next version starts; b is not in it
    batch = ad.ingest()
    assert batch["customers"].generation == 0
    assert lookup(home, configs, batch, tmp_path, [b"a", b"b"]) == [b"1", b"1"]
    log.produce("customers", [end_of_dataset_record()])
    batch = ad.ingest()
    assert batch["customers"].generation == 1
    assert lookup(home, configs, batch, tmp_path, [b"a", b"b"]) == [b"2", None]


def test_a_changed_extractor_makes_the_store_invalid(home: Home, log: DeltaLog) -> None:
    log.create("customers", 1)
    open_stores(home, log, stores()).ingest()
    ad = open_stores(home, log, stores(extractor="tests.integration.adjunct.extractors:upper"))
    assert ad.opened("customers").found is Found.INVALID and "extractor" in ad.opened("customers").reason


def test_fraction_of_a_partitioned_view() -> None:
    assert Fraction(1, 2).holds(3) and not Fraction(1, 2).holds(4)


def test_cli_and_airflow_page_show_stores_and_verify_a_sample(
    home: Home, log: DeltaLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import json

    from pipelines.adjunct.durable import DurableStore
    from pipelines.cli import main
    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job
    from tests.integration.runtime.jobs import DEMO
    from tests.integration.runtime.jobs import produce as produce_events

    log.create("customers", 2)
    produce(log, [(f"c{i}".encode(), b"v1") for i in range(20)])
    produce(log, [(b"c1", b"v2"), (b"c2", b"")])
    produce_events(home, "events", 4, 2)
    raw = JobConfig.load(DEMO).to_dict()
    raw.update(name=JOB, stores={"customers": {"input": "customers", "partitioning": "partitioned", "bootstrap": True}})
    create_job(home, JobConfig.from_dict(raw))
    configs = stores(partitioning="partitioned", bootstrap=True)
    open_stores(home, log, configs).ingest()

    def cli(*argv: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--home", str(home.root), "--json", *argv], out, err)
        return code, out.getvalue() + err.getvalue()

    code, text = cli("store", "list", JOB)
    listed = json.loads(text)
    assert code == 0 and listed[0]["store"] == "customers" and listed[0]["state"] == "valid"
    assert (
        listed[0]["positions"] == {str(p): v for p, v in log.end_positions("customers").items()}
        and listed[0]["changes_total"] == 22
    )
    code, text = cli("store", "verify", JOB, "customers")
    assert code == 0 and json.loads(text) == {"success": True, "checked": 20, "mismatches": 0, "examples": []}

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3] / "plugins"))  # as Airflow loads it
    from pipelines_airflow.app import render_page  # the Airflow page's data and HTML, without a running Airflow
    from pipelines_airflow.collect import collect

    page = collect(JOB, home)
    shown = page["jobs"][0]
    assert shown["errors"] == {} and shown["stores"][0]["store"] == "customers"
    html = render_page(page)
    assert "Adjunct data stores" in html and "deltalog.customers" in html and ">valid<" in html

    # a store that serves a wrong value is caught: write a change the stream never had
    durable = DurableStore(home, JOB, "customers")
    state = durable.latest()
    assert state is not None
    forged = durable.read_changes(state.incarnation, None, 0, state.seq).slice(0, 1)
    forged = forged.set_column(forged.schema.get_field_index("value"), "value", pa.array([b"forged"], pa.binary()))
    forged = forged.set_column(forged.schema.get_field_index("seq"), "seq", pa.array([state.seq + 1], pa.int64()))
    durable.append_segment(state.next(seq=state.seq + 1), forged, expect_previous=state.seq)
    code, text = cli("store", "verify", JOB, "customers")
    assert code == 2 and "forged" in text and '"mismatches": 1' in text


def test_compaction_retires_old_segments_and_an_old_local_base_still_catches_up(
    home: Home, log: DeltaLog, tmp_path: Path
) -> None:
    from pipelines.adjunct.durable import KEEP_SNAPSHOTS, DurableStore

    log.create("customers", 1)
    configs = stores(bootstrap=True)
    ad = open_stores(home, log, configs)
    produce(log, [(b"k", b"0"), (b"gone", b"x")])
    first = ad.ingest()
    engine = LocalEngine(tmp_path / "old")
    assert view_at(engine, home, JOB, configs[0], first["customers"]).get(b"k") == b"0"
    for i in range(1, 5):  # every round: a change, a segment, a snapshot; older segments are retired
        produce(log, [(b"k", str(i).encode())] + ([(b"gone", b"")] if i == 2 else []))
        batch = ad.ingest()
        ad.compact()
    durable = DurableStore(home, JOB, "customers")
    incarnation = batch["customers"].incarnation
    assert len(durable.snapshots(incarnation)) == KEEP_SNAPSHOTS
    # the old process's base is older than every kept segment: it rebuilds from a snapshot, exactly
    view = view_at(engine, home, JOB, configs[0], batch["customers"])
    assert view.get_many([b"k", b"gone"]).to_pylist() == [b"4", None]
    assert engine.builds == 2, "the retired tail forced one rebuild from the snapshot"


def test_a_restart_while_building_a_version_never_serves_half_of_it(home: Home, log: DeltaLog, tmp_path: Path) -> None:
    log.create("customers", 2)
    configs = stores(dataset="bounded", bootstrap=True)
    log.produce("customers", [(b"a", b"1", None), (b"b", b"1", None)])
    for p in range(2):  # seal version 0 in both partitions
        log.produce("customers", [end_of_dataset_record(_key_for(log, p))])
    log.produce("customers", [(b"a", b"2", None), (b"b", b"2", None)])
    first = open_stores(home, log, configs)
    batch = first.ingest()
    assert batch["customers"].generation == 0
    assert lookup(home, configs, batch, tmp_path, [b"a", b"b"]) == [b"1", b"1"]
    # the driver dies with version 1 half-built (one partition's marker delivered); a new driver continues it
    log.produce("customers", [end_of_dataset_record(_key_for(log, 0))])
    first.ingest()
    again = open_stores(home, log, configs)
    assert again.opened("customers").recovery.action is Action.KEEP
    batch = again.ingest()
    assert batch["customers"].generation == 0, "half of version 1 is never served"
    assert lookup(home, configs, batch, tmp_path, [b"a", b"b"]) == [b"1", b"1"]
    log.produce("customers", [end_of_dataset_record(_key_for(log, 1))])
    batch = again.ingest()
    assert batch["customers"].generation == 1
    assert lookup(home, configs, batch, tmp_path, [b"a", b"b"]) == [b"2", b"2"]


def _key_for(log: DeltaLog, partition: int) -> bytes:
    """A key the log places in ``partition`` (markers must land in every partition)."""
    from pipelines.core.partitioner import murmur2

    for i in range(1000):
        key = b"marker-%d" % i
        if (murmur2(key) & 0x7FFFFFFF) % 2 == partition:  # Kafka's placement, as the log's producer
            return key
    raise AssertionError("no key for the partition")


def test_version_switches_are_atomic_under_load(home: Home, log: DeltaLog, tmp_path: Path) -> None:
    """Readers on worker threads, the driver sealing versions meanwhile: every batch sees one whole version."""
    import threading
    import time

    log.create("customers", 1)
    keys = [f"k{i}".encode() for i in range(300)]
    configs = stores(dataset="bounded", bootstrap=True, batch_records=120)  # a version spans several segments
    ad = open_stores(home, log, configs)
    versions: list = []
    seen: list[tuple[int, set]] = []
    done = threading.Event()

    def reader() -> None:
        engine = LocalEngine(tmp_path / "reader")
        while not done.is_set() or versions:
            if not versions:
                time.sleep(0.005)
                continue
            version = versions.pop(0)
            values = view_at(engine, home, JOB, configs[0], version).get_many(keys).to_pylist()
            seen.append((version.generation, set(values)))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for generation in range(4):
            log.produce("customers", [(k, b"g%d" % generation, None) for k in keys])
            log.produce("customers", [end_of_dataset_record()])
            for _ in range(4):  # several batches per version, some while the next version is half-read
                versions.append(ad.ingest(max_records=120)["customers"])
    finally:
        done.set()
        thread.join(timeout=60)
    assert seen and not thread.is_alive()
    for generation, values in seen:
        expected = {None} if generation < 0 else {b"g%d" % generation}
        assert values == expected, f"a batch saw {sorted(map(str, values))} at generation {generation}"
    assert max(g for g, _ in seen) == 3
