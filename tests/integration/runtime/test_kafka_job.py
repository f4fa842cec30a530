"""A job reading Kafka end to end on real Spark and Delta, against a real Apache Kafka broker (the session's).

The same checks as the embedded log's (``test_elastic_job``, ``test_rescale``):
every record once, keys in order, buckets where the hash puts them; plus what
only a real broker shows: a job logging in over SASL, its progress read back by
Kafka's own ``kafka-consumer-groups`` tool, partitions added to its topic while
it runs, and the broker stopped and started again under it. Spark's Python
workers are other processes: they reach the broker at its 127.0.0.1 address.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from pipelines import cli
from pipelines.control import ControlPlane
from pipelines.errors import StreamError
from pipelines.jobs.config import JobConfig
from pipelines.operations import repartition, scaling
from pipelines.operations.jobs import create_job
from pipelines.operations.lost import skip_lost
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import batch_budget, run_job
from pipelines.storage.home import Home
from pipelines.systems.kafka import KafkaSystem
from testbed.servers.kafka_broker import KafkaBroker
from tests.integration.kafka_fixtures import SASL_PREFIX, new_topic, sasl_settings

from .jobs import DEMO, SeqProducer, misrouted, order_violations, sink


class KafkaEvents(SeqProducer):
    """Demo events on a Kafka topic of the test broker with a per-key seq that continues across calls."""

    def __init__(self, broker: KafkaBroker, partitions: int, keys: int, *, sasl: bool = False, **settings: Any) -> None:
        self.topic = new_topic(broker, partitions, SASL_PREFIX + "events" if sasl else "events")
        base = {"timeout_ms": 5000, "read_timeout_ms": 10000, **settings}
        self.settings = sasl_settings(broker, **base) if sasl else {"bootstrap_servers": broker.bootstrap, **base}
        self.kafka = KafkaSystem(self.settings)
        super().__init__(self.kafka, self.topic, partitions, keys, create=False)


def kafka_job(
    home: Home, name: str, factor: int, events: KafkaEvents, *, max_records: int = 100, start: str = "earliest"
) -> JobConfig:
    base = JobConfig.load(DEMO).to_dict()
    base.update(
        name=name,
        inputs=[{"system": "kafka", "stream": events.topic}],
        systems={"kafka": events.settings},
        elasticity_factor=factor,
        process_options={"latency_ms": 0},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": max_records, "trigger_interval": "0 seconds"},
        start=start,
    )
    config = JobConfig.from_dict(base)
    create_job(home, config)
    return config


def until(done: Callable[[], bool], what: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


class Driver(threading.Thread):
    """The job's continuous driver in this process, stopped at a batch boundary by a stop request."""

    def __init__(self, spark: Any, home: Home, job: str) -> None:
        super().__init__(name=f"driver-{job}", daemon=True)
        self.spark, self.home, self.job = spark, home, job
        self.messages: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            run_job(self.spark, self.home, self.job, available_now=False, progress=self.messages.append)
        except BaseException as e:  # the test reports it
            self.error = e

    def stop(self) -> None:
        requests.ask_stop(self.home, self.job)
        self.join(timeout=120)
        assert not self.is_alive(), "the driver stopped when asked"
        assert self.error is None, self.error


def test_a_job_created_with_start_latest_reads_only_the_records_after_its_creation(
    spark, home: Home, kafka_broker: KafkaBroker
) -> None:
    """Kafka's ``auto.offset.reset=latest``, Spark's ``startingOffsets: latest``: a new job on a topic with history."""
    events = KafkaEvents(kafka_broker, partitions=2, keys=16)
    events.produce(120)  # history the job is not to read
    ends = events.kafka.end_positions(events.topic)
    config = kafka_job(home, "fromnow", 2, events, start="latest")
    starts = ControlPlane(home).checkpoints.start(config.name, 1)
    assert {(s.partition, o) for s, o in starts.items()} == set(ends.items()), "every bucket starts at its end"
    events.produce(60)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rows = sink(home, config)
    after = zip(rows["partition"], rows["offset"], strict=True)
    assert len(rows) == 60 and all(int(o) >= int(ends[p]) for p, o in after)
    assert order_violations(rows) == [] and misrouted(rows, 2).empty
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok and verdict.records_expected == 60, verdict.summary()

    # Spark's startingTimestamp, Kafka's offsetsForTimes: a job from a time starts at each partition's first
    # record at or after it, found by the broker from the records' own timestamps (CreateTime).
    time.sleep(0.02)
    mark = datetime.now(UTC)
    time.sleep(0.02)
    firsts = events.kafka.end_positions(events.topic)
    events.produce(20)
    then = kafka_job(home, "fromthen", 2, events, start=mark.isoformat())
    starts = ControlPlane(home).checkpoints.start(then.name, 1)
    assert {(s.partition, o) for s, o in starts.items()} == set(firsts.items()), "every bucket starts at the time"


def test_records_deleted_before_the_job_read_them_stop_it_until_the_operator_skips_them(
    spark, home: Home, kafka_broker: KafkaBroker
) -> None:
    """Retention or ``kafka-delete-records`` moved a partition's start past the job's checkpoint: the records between
    are gone, so the run fails saying so (Spark's ``failOnDataLoss``, Kafka's ``auto.offset.reset=none``) and no
    batch is committed, rather than going on from wherever the broker now starts and calling that complete. The way
    on is the operator's: ``job skip-lost`` lists the range, then moves the job past it in a new model version whose
    history says what was skipped; the job reads the rest once and verifies."""
    events = KafkaEvents(kafka_broker, partitions=2, keys=16)
    events.produce(120)
    config = kafka_job(home, "lossy", 2, events)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for future in admin.delete_records([TopicPartition(events.topic, 0, 30)]).values():
        assert future.result().low_watermark == 30
    with pytest.raises(StreamError, match=r"partition 0 on .* no longer holds offset 0 \(retention or compaction"):
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    control = ControlPlane(home)
    assert control.checkpoints.latest_batch(config.name, 1) == -1, "no batch was committed"

    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), "--json", "job", "skip-lost", config.name]
    dry = subprocess.run([*argv, "--dry-run"], env=env, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    shown = json.loads(dry.stdout)
    gaps = [(g["partition"], g["checkpoint"], g["earliest"], g["records"]) for g in shown["gaps"]]
    assert shown["version"] is None and gaps == [(0, "0", "30", 30)], shown
    assert control.job_models.active_version(config.name) == 1, "a dry run changes nothing"

    _, version = skip_lost(home, config.name)
    assert version == 2 and control.job_models.active_version(config.name) == 2
    starts = control.checkpoints.start(config.name, 2)
    assert {o for s, o in starts.items() if s.partition == 0} == {"30"}
    assert {o for s, o in starts.items() if s.partition == 1} == {"0"}, "the other partition keeps its place"
    why = control.job_models.history(config.name)[-1]["reason"]
    assert "at most 30 records deleted before the job read them (events" in why and "/0 [0, 30))" in why, why
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rows = sink(home, config)
    assert len(rows) == 90 and not rows.duplicated(["partition", "offset"]).any()
    assert order_violations(rows) == []
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok and verdict.records_expected == 90, verdict.summary()
    assert skip_lost(home, config.name) == ([], None), "nothing left to skip"


def test_a_topic_deleted_and_created_again_under_a_job_stops_it_instead_of_skipping_the_new_records(
    spark, home: Home, kafka_broker: KafkaBroker
) -> None:
    """``kafka-topics --delete`` then ``--create`` of the job's topic: its checkpoints stand past the new topic's
    end. Read on, the job would wait there and then skip the new topic's records below them; it stops, naming the
    topic's old and new ids (KIP-516), as Kafka's own consumers notice a new topic. Once the new topic has grown past
    the checkpoints, offsets alone could no longer tell: the ids still do, and a rescale refuses too."""
    from pipelines.control.locks import ScalingLock
    from pipelines.errors import InputRewoundError
    from pipelines.operations.scaling import ScalingRequest, run_all

    events = KafkaEvents(kafka_broker, partitions=1, keys=4)
    events.produce(60)
    config = kafka_job(home, "recreated", 1, events)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert len(sink(home, config)) == 60

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for future in admin.delete_topics([events.topic]).values():
        future.result()
    until(lambda: events.topic not in admin.list_topics(timeout=10).topics, "the topic is gone", 60)
    until(lambda: _created(kafka_broker, events.topic), "the topic is made again", 60)
    events.produce(10)
    recreated = (
        rf"input kafka\.{events.topic} of job 'recreated' is not the stream model v1 was planned over: its id was"
    )
    with pytest.raises(InputRewoundError, match=recreated):
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    events.produce(100)  # past the checkpoint (60): the ends now look like the old topic's
    with pytest.raises(InputRewoundError, match=recreated):
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert len(sink(home, config)) == 60, "nothing was read from the new topic"
    with pytest.raises(InputRewoundError, match="a new version would carry them over"):
        run_all(home, ScalingRequest(config.name, 2, "scale onto the new topic"), say=lambda m: None)
    assert ControlPlane(home).job_models.active(config.name).version == 1
    lock = ScalingLock(home).state(config.name)
    assert lock is None or not lock.held, "the refused rescale let its lock go"
    assert all(e.finished_at is not None for e in ControlPlane(home).events.history(config.name))


def _created(broker: KafkaBroker, topic: str) -> bool:
    """Create ``topic`` with one partition; False while the broker still deletes the old one of that name."""
    try:
        broker.create_topic(topic, 1)
    except Exception as e:  # TOPIC_ALREADY_EXISTS while the deletion completes
        if "already exists" in str(e).lower() or "marked for deletion" in str(e).lower():
            return False
        raise
    return True


def test_a_kafka_job_over_sasl_at_factors_1_and_4_gives_the_same_rows_once_and_kafkas_tool_sees_its_lag(
    spark, home: Home, kafka_broker: KafkaBroker
) -> None:
    events = KafkaEvents(kafka_broker, partitions=2, keys=64, sasl=True)
    events.produce(500)
    outputs = {}
    for factor in (1, 4):
        config = kafka_job(home, f"{SASL_PREFIX}f{factor}", factor, events)  # its consumer group is its name
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
        rows = sink(home, config)
        assert len(rows) == events.total, f"factor {factor}: {len(rows)} rows for {events.total} records"
        assert not rows.duplicated(["partition", "offset"]).any()
        assert order_violations(rows) == []
        assert misrouted(rows, factor).empty
        assert rows["virtual_task"].nunique() == 2 * factor
        budget = batch_budget(100, factor)
        assert rows["batch_id"].nunique() >= math.ceil(events.total / budget) > 1, "admission control splits the input"
        outputs[factor] = set(zip(rows["partition"], rows["offset"], rows["event_key"], rows["seq"], strict=True))
        lag = ControlPlane(home).metrics.read(config.name)
        lag = lag[lag["metric"] == "lag_records"]
        assert lag.groupby("task")["value"].last().eq(0).all()
    assert outputs[1] == outputs[4]

    # The job's progress is in its consumer group, where Kafka's own kafka-consumer-groups tool reads it.
    done = {p: int(e) for p, e in events.kafka.end_positions(events.topic).items()}
    events.produce(40)  # not read by the job: the tool must show exactly this as lag
    now = {p: int(e) for p, e in events.kafka.end_positions(events.topic).items()}
    rows = kafka_broker.consumer_groups(f"{SASL_PREFIX}f4")
    assert [(r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag) for r in rows] == [
        (events.topic, p, done[p], now[p], now[p] - done[p]) for p in (0, 1)
    ]
    assert sum(r.lag or 0 for r in rows) == 40
    events.kafka.close()


def test_partitions_added_to_a_live_topic_are_absorbed_keys_stay_on_their_tasks_and_every_record_verifies(
    spark, home: Home, kafka_broker: KafkaBroker
) -> None:
    """The topic grows 2 -> 4 with CreatePartitions while the job runs at factor 2 and records keep coming.

    The producer refreshes its metadata every 0.5 s, well inside the job's 2 s hold-back window
    (``expansion_grace_ms``), so each key's records in a new partition follow those in its old one.
    """
    refresh = {"topic.metadata.refresh.interval.ms": 500}
    events = KafkaEvents(kafka_broker, partitions=2, keys=24, expansion_grace_ms=2000, properties=refresh)
    config = kafka_job(home, "kafka-live", 2, events, max_records=80)
    events.produce(200)
    driver = Driver(spark, home, config.name)
    driver.start()
    control = ControlPlane(home)
    stop_producing = threading.Event()

    def keep_producing() -> None:
        while not stop_producing.is_set():
            events.produce(20)
            time.sleep(0.05)

    producer = threading.Thread(target=keep_producing, daemon=True)
    try:
        until(lambda: (control.checkpoints.latest_batch(config.name, 1) or -1) >= 1, "the first batches")
        producer.start()

        kafka_broker.create_partitions(events.topic, 4)  # the live topic grows under the running job
        until(lambda: events.kafka.describe(events.topic).partition_count == 4, "the producer's view of 4 partitions")
        (change,) = repartition.detect(home, [config.name])
        assert (change.before, change.after, change.error) == (2, 4, None)
        outcome = scaling.run_all(home, change.request(), catch_up_timeout_s=120, say=lambda m: None)
        assert outcome["status"] == "verified", outcome
        until(lambda: (control.checkpoints.latest_batch(config.name, 2) or -1) >= 2, "model v2's batches")
        stop_producing.set()
        producer.join(30)
        until(lambda: len(sink(home, config)) >= events.total, "the job to catch up")
    finally:
        stop_producing.set()
        driver.stop()
    rows = sink(home, config)
    assert len(rows) == events.total
    assert not rows.duplicated(["stream", "partition", "offset"]).any()
    assert order_violations(rows) == []
    assert set(rows["model_version"]) == {1, 2}
    assert set(rows[rows["model_version"] == 2]["partition"]) == {0, 1, 2, 3}, "the new partitions were read"
    # Keys stayed on their tasks through the expansion (GroupByPartitionFixedTaskNum): one task per key, throughout.
    tasks_per_key = rows.groupby("event_key")["virtual_task"].nunique()
    assert tasks_per_key.eq(1).all(), tasks_per_key[tasks_per_key > 1]
    assert rows[rows["partition"] >= 2]["event_key"].nunique() > 0, "some keys now live in the new partitions"
    # Every scaling window, and the whole run, verified as an operator would.
    for event in ControlPlane(home).events.history(config.name):
        verdict = verify_job(home, config.name, sequence="seq", event=event.event_id)
        assert verdict.ok, verdict.summary()
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["--home", str(home.root), "verify", config.name, "--sequence", "seq"], out, err)
    assert code == 0, err.getvalue() + out.getvalue()
    events.kafka.close()


def test_a_kafka_job_waits_out_a_stopped_broker_and_resumes_with_nothing_lost(
    spark, home: Home, kafka_broker: KafkaBroker
) -> None:
    """The session broker is stopped for 10 s under a running job, then started again on its ports and data."""
    events = KafkaEvents(kafka_broker, partitions=2, keys=16, timeout_ms=1500)  # planning gives up on a silent broker
    config = kafka_job(home, "kafka-outage", 2, events, max_records=50)
    events.produce(150)
    driver = Driver(spark, home, config.name)
    driver.start()
    control = ControlPlane(home)
    try:
        until(lambda: len(sink(home, config)) >= events.total, "the first records")
        batches_before = control.checkpoints.latest_batch(config.name, 1) or 0
        kafka_broker.stop()
        down_at = time.monotonic()
        try:
            started = time.monotonic()
            try:
                events.kafka.end_positions(events.topic)
                raise AssertionError("a stopped broker answered")
            except StreamError as error:
                assert f"brokers {events.kafka.brokers} did not answer within 1500 ms" in str(error)
            assert time.monotonic() - started < 5
            while time.monotonic() - down_at < 10:  # the outage itself lasts 10 s; the job keeps trying
                time.sleep(0.5)
            batches_down = control.checkpoints.latest_batch(config.name, 1) or 0
        finally:
            kafka_broker.start()  # the same ports and data: what clients see after a broker restart
        events.produce(150)
        until(lambda: len(sink(home, config)) >= events.total, "the records written after the restart")
    finally:
        driver.stop()
    assert batches_down <= batches_before + 1, "no batch was planned while the broker was down"
    rows = sink(home, config)
    assert len(rows) == events.total == 300
    assert not rows.duplicated(["stream", "partition", "offset"]).any()
    assert order_violations(rows) == []
    assert events.kafka.committed(config.name, events.topic) == events.kafka.end_positions(events.topic)
    reports = control.metrics.read(config.name, metrics=["input_unavailable_s", "input_recovered_s"])
    down = reports[reports["metric"] == "input_unavailable_s"]
    back = reports[reports["metric"] == "input_recovered_s"]
    assert len(down) == 1, "the outage is reported once (then every 30 s), not once per try"
    assert len(back) == 1 and 8.0 <= back["value"].iloc[0] <= 60.0, f"its length is recorded: {back}"
    events.kafka.close()
