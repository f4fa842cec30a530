"""A ``system: kinesis`` job on real Spark against kinesis-mock: factor 1, factor 2, a split (1:n), 1:1 switches.

Each step runs the job with ``available_now`` and checks the sink (every
record once, per-key order, routing) and the platform's data-quality
verification of the whole run.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pipelines.control import ControlPlane
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig
from pipelines.observe.collect import observe
from pipelines.operations import repartition, scaling
from pipelines.operations.jobs import create_job
from pipelines.operations.lost import skip_lost
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.kinesis import KinesisSystem
from pipelines.systems.kinesis.positions import decode_slot
from testbed.servers.kinesis_emulator import KinesisEmulator
from tests.integration.systems.kpl import kpl_pack

from .jobs import DEMO, SeqProducer, misrouted, order_violations, sink
from .test_rescale import rescale

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with KinesisEmulator() as url:
        yield url


def _job(name: str, stream: str, settings: dict[str, Any], max_records: int, **more: Any) -> dict[str, Any]:
    """The demo's job on one Kinesis stream, as a YAML mapping: its own tables, no simulated latency."""
    raw = JobConfig.load(DEMO).to_dict()
    raw.update(
        name=name,
        inputs=[{"system": "kinesis", "stream": stream}],
        systems={"kinesis": settings},
        process_options={"latency_ms": 0},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": max_records, "trigger_interval": "0 seconds"},
        **more,
    )
    return raw


def _check(home: Home, config: JobConfig, total: int, step: str) -> None:
    rows = sink(home, config)
    assert len(rows) == total, f"after {step}: {len(rows)} rows for {total} records"
    # A Kinesis record position names its shard, so it is unique in the stream whatever slot read it.
    assert not rows.duplicated(["stream", "offset"]).any(), f"after {step}: duplicates"
    assert order_violations(rows) == [], f"after {step}: keys out of order"
    for version, part in rows.groupby("model_version"):
        factor = ControlPlane(home).job_models.get(config.name, int(version)).elasticity_factor
        assert misrouted(part, factor).empty, f"after {step}: misrouted rows"
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok and verdict.records_expected == total, f"after {step}: {verdict.summary()}"


def test_a_kinesis_job_runs_at_factor_1_and_2_across_a_split_and_a_merge_switching_to_one_slot_per_shard(
    spark, home: Home, endpoint: str
) -> None:
    settings = {"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": 50.0}
    system = KinesisSystem(settings)
    producer = SeqProducer(system, "clicks", 2, keys=30)
    raw = _job("kin", "clicks", settings, 150)
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    with pytest.raises(ConfigError, match="skip-lost is not available for kinesis input 'clicks'"):
        skip_lost(home, config.name)  # slots are laid out again by the system, not ranges to move past

    def run(step: str) -> None:
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
        _check(home, config, producer.total, step)

    producer.produce(200)
    run("factor 1")

    rescale(home, config.name, 2, reason="scale up")
    producer.produce(100)
    producer.produce(100, pack=lambda records: kpl_pack(system, "clicks", records))  # as the KPL sends them
    run("factor 2, KPL aggregates among the records")
    assert sink(home, config)["offset"].str.count(":").eq(2).sum() == 75, "a user record per aggregated record"

    # A split while records of every key are unread in the parent: the model keeps 2 slots, so one slot reads
    # two shards (1:n) and the children wait until the parent is read to its end.
    producer.produce(150)
    system.split_shard("clicks", "shardId-000000000000")
    producer.produce(150)
    run("split, 1:n")
    latest = ControlPlane(home).checkpoints.latest(config.name, 2)
    assert max(len(decode_slot(p).shards) for p in latest.offsets.values()) >= 2, "a slot holds two shards"

    # The repartition watch sees 3 open shards for 2 slots and switches the job to one slot per shard through the
    # scaling path (no live driver here, so the new model gets a catch-up run), checkpoints carried over.
    producer.produce(200)
    changes = repartition.detect(home, [config.name])
    assert [(c.before, c.after, c.error) for c in changes] == [(2, 3, None)]

    def catch_up(h: Home, j: str) -> None:
        run_job(spark, h, j, available_now=True, progress=lambda m: None)

    outcome = scaling.run_all(home, changes[0].request(), sequence="seq", catch_up=catch_up, say=lambda m: None)
    assert outcome["status"] == "verified", outcome
    model = ControlPlane(home).job_models.active(config.name)
    assert list(model.partitions().values()) == [3] and model.elasticity_factor == 2
    starts = ControlPlane(home).checkpoints.start(config.name, model.version)
    assert all(len(decode_slot(p).unfinished()) <= 1 for p in starts.values()), "one shard per slot"
    _check(home, config, producer.total, "1:1 after the split")
    assert repartition.detect(home, [config.name]) == []

    # A merge of the split's upper child with shard 1 (two parents in two slots) shrinks the job to 2 slots.
    producer.produce(100)
    system.merge_shards("clicks", "shardId-000000000003", "shardId-000000000001")
    producer.produce(100)
    changes = repartition.detect(home, [config.name])
    assert [(c.before, c.after, c.error) for c in changes] == [(3, 2, None)]
    outcome = scaling.run_all(home, changes[0].request(), sequence="seq", catch_up=catch_up, say=lambda m: None)
    assert outcome["status"] == "verified", outcome
    assert list(ControlPlane(home).job_models.active(config.name).partitions().values()) == [2]
    _check(home, config, producer.total, "1:1 after the merge")
    events = ControlPlane(home).events.history(config.name)
    assert [(e.from_version, e.to_version) for e in events] == [(1, 2), (2, 3), (3, 4)]
    for event in events:  # each scaling window verifies on its own, from the old model's start checkpoints
        verdict = verify_job(home, config.name, sequence="seq", event=event.event_id)
        assert verdict.ok and verdict.records_expected > 0, verdict.summary()


def test_a_kinesis_job_created_with_start_latest_reads_what_arrives_after_its_creation_across_a_split(
    spark, home: Home, endpoint: str
) -> None:
    settings = {"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": 50.0}
    system = KinesisSystem(settings)
    producer = SeqProducer(system, "views", 2, keys=12)
    producer.produce(60)  # before the job: never read
    raw = _job("kin_latest", "views", settings, 40, start="latest")  # KCL's LATEST
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    time.sleep(0.01)  # arrival times are milliseconds: the next records arrive after the creation's
    producer.produce(50)
    system.split_shard("views", "shardId-000000000000")
    producer.produce(50)  # partly in the children, which the job takes over after their parent
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rows = sink(home, config)
    first_seq = {f"key-{i % 12}": 5 for i in range(12)}  # 60 records over 12 keys came before the job
    assert len(rows) == 100 and not rows.duplicated(["stream", "offset"]).any()
    assert all(seq >= first_seq[key] for key, seq in zip(rows["event_key"], rows["seq"], strict=True))
    assert order_violations(rows) == []
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok and verdict.records_expected == 100, verdict.summary()
    with pytest.raises(ConfigError, match="is in the future"):  # a start time is one the input has reached
        create_job(home, JobConfig.from_dict(_job("kin_later", "views", settings, 40, start="2999-01-01T00:00:00Z")))
    assert ControlPlane(home).job_models.latest_version("kin_later") is None, "nothing was created for it"


def test_a_kinesis_job_waits_out_an_emulator_that_stops_answering_and_resumes_with_nothing_lost(
    spark, home: Home
) -> None:
    """The emulator is frozen (SIGSTOP: connections hang, as behind a dead network) for a while, then thawed."""
    emulator = KinesisEmulator()  # its own: this test freezes it
    url = emulator.start()
    try:
        settings = {
            "endpoint_url": url,
            "region": "us-east-1",
            "connect_timeout_s": 1.0,
            "request_timeout_s": 2.0,
            "max_attempts": 2,
            "backoff_cap_s": 0.5,
        }
        producer = SeqProducer(KinesisSystem(settings), "frozen", 2, keys=16)
        raw = _job("kin_outage", "frozen", settings, 100)
        config = JobConfig.from_dict(raw)
        create_job(home, config)
        producer.produce(150)
        driver = threading.Thread(
            target=lambda: run_job(spark, home, config.name, available_now=False, progress=lambda m: None)
        )
        driver.start()
        deadline = time.monotonic() + 240
        try:
            while _rows(home, config) < producer.total and time.monotonic() < deadline:
                time.sleep(0.3)
            assert emulator.process is not None
            os.killpg(emulator.process.pid, signal.SIGSTOP)
            # Long enough that the planner or a read meets the freeze: a batch's commit, reading the input's lag,
            # can spend up to max_attempts x request_timeout_s (and botocore's back-off) on it and report it only
            # as that batch's input_unavailable count, which is how CI once saw an 8 s freeze go unplotted.
            time.sleep(15.0)
            os.killpg(emulator.process.pid, signal.SIGCONT)
            producer.produce(150)
            while _rows(home, config) < producer.total and time.monotonic() < deadline:
                time.sleep(0.3)
        finally:
            if emulator.process is not None:
                os.killpg(emulator.process.pid, signal.SIGCONT)
            requests.ask_stop(home, config.name)
            driver.join(timeout=120)
        assert not driver.is_alive(), "the driver survived the outage and stopped when asked"
        _check(home, config, 300, "an outage of the emulator")
        reports = ControlPlane(home).metrics.read(config.name, metrics=["input_unavailable_s", "input_recovered_s"])
        assert (reports["metric"] == "input_unavailable_s").sum() >= 1, "the outage is reported"
        assert (reports["metric"] == "input_recovered_s").sum() >= 1, "and its end"
        outages = [m for m in observe(home, config.name, inputs=False)["markers"] if m["kind"] == "outage"]
        assert outages and all(m["until"] is not None for m in outages), "the view marks the outage, ended"
        # The freeze is timed by whoever meets it: the planner between batches, or a read in flight, which waits
        # it out (read_timeout_s) and reports how long it was held up. Plans between failed calls may answer from
        # the shard listing the system keeps, so the markers are there, ended, and bounded, not exactly 8 s.
        assert 0.0 < sum(m["downtime_s"] for m in outages) <= 60.0, outages
    finally:
        emulator.stop()


def _rows(home: Home, config: JobConfig) -> int:
    table = home.sinks / config.sink_table
    return len(sink(home, config)) if (table / "_delta_log").local_path().exists() else 0


@pytest.mark.parametrize("shards", [2, 3])
def test_a_stream_deleted_and_created_again_under_a_job_stops_it_instead_of_skipping_the_new_records(
    spark, home: Home, endpoint: str, shards: int
) -> None:
    """The job's slots hold sequence numbers of the old stream when a new one of the same name replaces it. kinesis-mock
    numbers a new stream's records as it numbered the old one's (when both were made in the same second), so read on,
    the job would take the new records at its old sequence numbers for ones it read and skip those below them; or it
    would call the old numbers trimmed by retention. It stops instead, naming the stream, and commits nothing."""
    from pipelines.errors import InputRewoundError

    settings = {"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": 50.0}
    system = KinesisSystem(settings)
    stream = f"reborn{shards}"
    producer = SeqProducer(system, stream, 2, keys=8)
    raw = _job(f"kin_reborn{shards}", stream, settings, 500)
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    producer.produce(60)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert len(sink(home, config)) == 60
    control = ControlPlane(home)
    batches = control.checkpoints.latest_batch(config.name, 1)

    system.delete(stream)
    again = SeqProducer(system, stream, shards, keys=8)
    again.produce(20)
    with pytest.raises(InputRewoundError, match=rf"Kinesis stream '{stream}' was deleted and created again"):
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert control.checkpoints.latest_batch(config.name, 1) == batches, "no batch was committed"
    assert len(sink(home, config)) == 60, "nothing was read from the new stream"


def test_a_stateful_kinesis_job_keeps_every_keys_state_across_a_split_a_merge_and_their_relayouts(
    spark, home: Home, endpoint: str
) -> None:
    """A key moves to a child shard, maybe read by another slot: its state is there when the child is read,
    after its parents (KCL's rule), so every key's fold holds through a split, a merge and a factor of 3."""
    from tests.integration.state.helpers import TOTALS, TotalsProducer, fold_mismatches

    settings = {"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": 50.0}
    system = KinesisSystem(settings)
    system.create("totals-in", 2)
    producer = TotalsProducer(system, "totals-in", keys=24)
    raw = JobConfig.load(TOTALS).to_dict()
    raw.update(
        name="kin-state",
        inputs=[{"system": "kinesis", "stream": "totals-in"}],
        systems={"kinesis": settings},
        process_options={"latency_ms": 0},
        sink={"table": "kin_state_out"},
        dead_letter={"table": "kin_state_dead"},
        batch={"max_records": 120, "trigger_interval": "0 seconds"},
    )
    config = JobConfig.from_dict(raw)
    create_job(home, config)

    def run(step: str) -> None:
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
        assert fold_mismatches(home, config, producer) == [], f"after {step}"
        verdict = verify_job(home, config.name, sequence="seq")
        assert verdict.ok and verdict.states[0].keys == 24, f"after {step}: {verdict.summary()}"

    def relayout(step: str) -> None:
        changes = repartition.detect(home, [config.name])
        catch = lambda h, j: run_job(spark, h, j, available_now=True, progress=lambda m: None)  # noqa: E731
        outcome = scaling.run_all(home, changes[0].request(), sequence="seq", catch_up=catch, say=lambda m: None)
        assert outcome["status"] == "verified", f"{step}: {outcome}"

    producer.produce(150)
    run("factor 1")
    rescale(home, config.name, 3, reason="a factor of 3")
    producer.produce(100)
    system.split_shard("totals-in", "shardId-000000000000")  # records of its keys unread in the parent
    producer.produce(100)
    run("split, 1:n")
    relayout("1:1 after the split")
    producer.produce(100)
    system.merge_shards("totals-in", "shardId-000000000003", "shardId-000000000001")
    producer.produce(100)
    relayout("1:1 after the merge")
    run("after the merge")
