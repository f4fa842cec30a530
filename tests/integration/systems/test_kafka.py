"""Kafka as an input system against a real Kafka-protocol broker (librdkafka's mock cluster in a helper process).

What the mock broker does not do, and so what these tests cannot show:
it answers no CreateTopics or CreatePartitions (topics come from the helper,
expansion is refused before it reaches the broker or checked on a real
cluster), it keeps the last stable offset equal to the high watermark even
while a transaction is open, and it returns an aborted transaction's records
to a read-committed consumer (its Fetch answers carry no aborted-transaction
list). It does write transaction markers, so offsets have real gaps.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipelines.control.home import Home
from pipelines.core.partitioner import kafka_partition
from pipelines.errors import ConfigError, PartitionChangeError, StreamError
from pipelines.jobs.config import JobConfig
from pipelines.operations import repartition
from pipelines.operations.jobs import create_job
from pipelines.systems.base import Bounded, InputSystem, SupportsCommitted
from pipelines.systems.kafka import KafkaSystem, position_key, validate_settings
from pipelines.systems.kafka_mock import MockKafka
from tests.integration.kafka_fixtures import unique_topic
from tests.integration.systems.contract import check_input_system_contract

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka(kafka_broker: MockKafka) -> Iterator[KafkaSystem]:
    system = KafkaSystem({"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 5000, "read_timeout_ms": 5000})
    yield system
    system.close()


def _topic(broker: MockKafka, partitions: int, prefix: str = "t") -> str:
    name = unique_topic(prefix)
    broker.create_topic(name, partitions)
    return name


def test_kafka_keeps_the_input_system_contract(kafka_broker: MockKafka, kafka: KafkaSystem) -> None:
    assert isinstance(kafka, InputSystem)
    check_input_system_contract(kafka, _topic(kafka_broker, 3), abilities=frozenset({SupportsCommitted}))


def test_keys_land_where_java_producers_put_them_and_records_keep_key_timestamp_headers(
    kafka_broker: MockKafka, kafka: KafkaSystem
) -> None:
    topic = _topic(kafka_broker, 4)
    records = [(f"user-{i}".encode(), f"v{i}".encode(), {"n": str(i), "h": "é"}) for i in range(200)]
    before = time.time()
    placed = kafka.produce(topic, records)
    assert [p for p, _ in placed] == [kafka_partition(key, 4) for key, _, _ in records]
    assert len(Counter(p for p, _ in placed)) == 4
    ends = kafka.end_positions(topic)
    meta = kafka.describe(topic)
    assert {p: (m.earliest, m.end) for p, m in meta.partitions.items()} == {p: ("0", ends[p]) for p in range(4)}
    got = kafka.read(topic, 1, "0", ends[1]).records
    want = [r for r, (p, _) in zip(records, placed, strict=True) if p == 1]
    assert got.column("key").to_pylist() == [k for k, _, _ in want]
    assert got.column("headers").to_pylist() == [f'{{"n":"{h["n"]}","h":"é"}}' for _, _, h in want]
    stamps = [t.timestamp() for t in got.column("timestamp").to_pylist()]
    assert all(before - 1 <= s <= time.time() + 1 for s in stamps)


def _transactional(broker: MockKafka) -> tuple[str, dict[str, list[int]]]:
    """One partition: a committed transaction, an aborted one, a committed one; markers make gaps."""
    topic = _topic(broker, 1, "txn")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(10)
    for name, count, commit in (("a", 5, True), ("x", 3, False), ("b", 2, True)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, key=b"k", value=f"{name}{i}".encode(), partition=0)
        producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)
    return topic, {}


def test_reads_complete_across_transaction_markers_and_ends_in_gaps(
    kafka_broker: MockKafka, kafka: KafkaSystem
) -> None:
    topic, _ = _transactional(kafka_broker)
    end = kafka.end_positions(topic)[0]
    whole = kafka.read(topic, 0, "0", end)
    offsets = [int(o) for o in whole.records.column("offset").to_pylist()]
    values = [v.decode() for v in whole.records.column("value").to_pylist()]
    # 10 records in 13 offsets: the three commit/abort markers are gaps no record fills.
    assert int(end) == 13 and len(offsets) == 10
    assert offsets == sorted(offsets) and offsets[-1] == 11
    assert [v for v in values if v[0] in "ab"] == ["a0", "a1", "a2", "a3", "a4", "b0", "b1"]
    # The range ends after a trailing commit marker: it completes, and the next position is the end (not 11+1=12).
    assert whole.next_position == end
    # A range ending on the first marker (offset 5) completes with the first transaction only.
    first = kafka.read(topic, 0, "0", "6")
    assert first.records.column("value").to_pylist() == [b"a0", b"a1", b"a2", b"a3", b"a4"]
    assert first.next_position == "6"
    # Starting on a marker reads on from the next record.
    assert kafka.read(topic, 0, "5", "7").records.column("offset").to_pylist() == ["6"]
    # Bounded reads of 4 walk the partition without gap or overlap and end past the trailing marker.
    position, seen, rounds = "0", [], 0
    while rounds < 10:
        part = kafka.read(topic, 0, position, Bounded(position, 4))
        seen += part.records.column("offset").to_pylist()
        position = part.next_position
        rounds += 1
        if part.records.num_rows == 0:
            break
    assert [int(o) for o in seen] == offsets and position == end
    # A planned end of "at most 6 records" is an offset; over the gap it covers fewer records, never more.
    planned = kafka.advance(topic, {0: "0"}, {0: 6}, {0: end})[0]
    assert planned == "6" and kafka.read(topic, 0, "0", planned).records.num_rows == 5
    assert kafka.records_between(topic, 0, "0", end) == 13  # an upper bound: offsets, as Kafka's lag tools count


def test_a_read_of_records_not_yet_written_times_out_with_a_clear_error(
    kafka_broker: MockKafka,
) -> None:
    topic = _topic(kafka_broker, 1)
    system = KafkaSystem({"bootstrap_servers": kafka_broker.bootstrap, "read_timeout_ms": 500})
    try:
        system.produce(topic, [(b"k", b"v", None)])
        with pytest.raises(StreamError, match=rf"{topic}.*partition 0.*did not reach offset 5 within 500 ms"):
            system.read(topic, 0, "0", "5")
    finally:
        system.close()


def test_unknown_topic_and_authorization_failure_name_the_topic_and_brokers(
    kafka_broker: MockKafka, kafka: KafkaSystem
) -> None:
    with pytest.raises(StreamError, match=rf"topic 'no-such-topic' does not exist on {kafka_broker.bootstrap}"):
        kafka.describe("no-such-topic")
    with pytest.raises(StreamError, match="does not exist"):
        kafka.end_positions("no-such-topic")
    # Describing must not have created it (brokers auto-create topics on metadata requests by default).
    with pytest.raises(StreamError, match="does not exist"):
        kafka.describe("no-such-topic")
    secret = _topic(kafka_broker, 1, "acl")
    kafka_broker.topic_error(secret, 29)  # TOPIC_AUTHORIZATION_FAILED, as a broker with ACLs answers
    try:
        with pytest.raises(StreamError, match=rf"not authorized to describe Kafka topic '{secret}' on .*ACLs"):
            kafka.describe(secret)
    finally:
        kafka_broker.topic_error(secret, 0)
    assert kafka.describe(secret).partition_count == 1


def test_an_unreachable_broker_fails_within_the_configured_time_naming_the_brokers() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    brokers = f"127.0.0.1:{port}"
    system = KafkaSystem({"bootstrap_servers": brokers, "timeout_ms": 1000})
    started = time.monotonic()
    with pytest.raises(
        StreamError, match=rf"brokers {brokers} did not answer within 1000 ms while describing topic 'events'"
    ):
        system.describe("events")
    assert time.monotonic() - started < 5
    system.close()


def test_a_broker_down_then_up_is_reported_then_served_again() -> None:
    with MockKafka(topics={"events": 2}) as broker:
        system = KafkaSystem({"bootstrap_servers": broker.bootstrap, "timeout_ms": 1500, "read_timeout_ms": 1500})
        try:
            placed = system.produce("events", [(f"k{i}".encode(), b"v", None) for i in range(20)])
            ends = system.end_positions("events")
            broker.set_down(True)
            with pytest.raises(StreamError, match=rf"brokers {broker.bootstrap} did not answer within 1500 ms"):
                system.end_positions("events")
            broker.set_down(False)
            assert system.end_positions("events") == ends  # nothing lost while it was down
            assert sum(system.read("events", p, "0", e).records.num_rows for p, e in ends.items()) == len(placed)
        finally:
            system.close()


def test_acknowledge_commits_the_job_floors_to_its_consumer_group(kafka_broker: MockKafka, kafka: KafkaSystem) -> None:
    topic = _topic(kafka_broker, 2)
    kafka.produce(topic, [(f"k{i}".encode(), b"v", None) for i in range(30)])
    ends = kafka.end_positions(topic)
    kafka.acknowledge("orders-job", topic, {0: "3", 1: ends[1]})
    assert kafka.committed("orders-job", topic) == {0: "3", 1: ends[1]}
    kafka.acknowledge("orders-job", topic, {0: ends[0]})
    # What a lag tool sees: the group's offsets through Kafka's admin API.
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    request = ConsumerGroupTopicPartitions("orders-job", [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    found = admin.list_consumer_group_offsets([request])["orders-job"].result()
    assert {tp.partition: str(tp.offset) for tp in found.topic_partitions} == ends

    named = KafkaSystem({"bootstrap_servers": kafka_broker.bootstrap, "consumer_group": "lag-watch"})
    off = KafkaSystem({"bootstrap_servers": kafka_broker.bootstrap, "commit_progress": False})
    try:
        named.acknowledge("orders-job", topic, {1: "1"})
        off.acknowledge("quiet-job", topic, {1: "1"})
        assert named.committed("lag-watch", topic) == {1: "1"}
        assert kafka.committed("quiet-job", topic) == {}
    finally:
        named.close()
        off.close()


def test_expansion_refuses_shrinking_and_non_multiples_and_the_current_count_is_a_no_op(
    kafka_broker: MockKafka, kafka: KafkaSystem
) -> None:
    topic = _topic(kafka_broker, 2)
    with pytest.raises(PartitionChangeError, match="cannot shrink"):
        kafka.expand(topic, 1)
    with pytest.raises(PartitionChangeError, match="multiple"):
        kafka.expand(topic, 3)
    assert kafka.expand(topic, 2).partition_count == 2
    with pytest.raises(ConfigError):
        kafka.expand(topic, 0)
    # The mock answers no CreateTopics: the error says why instead of hanging.
    with pytest.raises(StreamError, match="creating topic"):
        KafkaSystem({"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 500}).create(unique_topic(), 2)


def test_settings_refuse_unknown_fields_and_secrets_in_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"'bootstrap_server' \(did you mean 'bootstrap_servers'\?\)"):
        validate_settings({"bootstrap_server": "x:9092"})
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        validate_settings({})
    with pytest.raises(ConfigError, match=r"sasl\.password looks like a secret"):
        validate_settings({"bootstrap_servers": "x:9092", "properties": {"sasl.password": "hunter2"}})
    with pytest.raises(ConfigError, match=r"isolation\.level is set by the platform"):
        validate_settings({"bootstrap_servers": "x:9092", "properties": {"isolation.level": "read_uncommitted"}})
    with pytest.raises(ConfigError, match="timeout_ms"):
        validate_settings({"bootstrap_servers": "x:9092", "timeout_ms": 0})
    ok = validate_settings(
        {
            "bootstrap_servers": ["a:9092", "b:9092"],
            "properties": {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "enable.ssl.certificate.verification": False,
            },
            "secrets_env": {"sasl.password": "KAFKA_TEST_PASSWORD"},
        }
    )
    assert ok.bootstrap_servers == "a:9092,b:9092"
    assert ok.properties["enable.ssl.certificate.verification"] == "false"
    # The job config checks the section through the module, with the field named.
    with pytest.raises(ConfigError, match=r"job: systems\.kafka: unknown field"):
        JobConfig.from_dict(
            {
                "name": "j",
                "inputs": [{"system": "kafka", "stream": "t"}],
                "process": "pipelines.demo.enrich:process",
                "output_schema": "key STRING",
                "sink": "out",
                "systems": {"kafka": {"bootstrap_servers": "x:9092", "tiemout_ms": 5}},
            },
            "job",
        )

    system = KafkaSystem({"bootstrap_servers": "x:9092", "secrets_env": {"sasl.password": "KAFKA_TEST_PASSWORD"}})
    monkeypatch.delenv("KAFKA_TEST_PASSWORD", raising=False)
    with pytest.raises(ConfigError, match="KAFKA_TEST_PASSWORD is not set"):
        system._conf()
    monkeypatch.setenv("KAFKA_TEST_PASSWORD", "hunter2")
    assert system._conf()["sasl.password"] == "hunter2"
    connection = '{"conn_type": "kafka", "extra": {"sasl.username": "svc", "sasl.password": "s3"}}'
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", connection)
    conf = KafkaSystem({"bootstrap_servers": "x:9092", "connection_id": "kafka_prod"})._conf()
    assert (conf["sasl.username"], conf["sasl.password"], conf["bootstrap.servers"]) == ("svc", "s3", "x:9092")
    assert "s3" not in repr(KafkaSystem({"bootstrap_servers": "x:9092", "connection_id": "kafka_prod"}).__getstate__())
    assert os.environ["KAFKA_TEST_PASSWORD"] == "hunter2"


def test_positions_are_offsets_ordered_as_numbers() -> None:
    assert position_key("10") > position_key("9")
    with pytest.raises(StreamError, match="decimal"):
        position_key("abc")
    with pytest.raises(StreamError, match=">= 0"):
        position_key("-1")


def test_the_repartition_watch_sees_a_topic_with_more_partitions_than_the_job_model(
    kafka_broker: MockKafka, home: Home
) -> None:
    """The mock cannot add partitions: the topic is made again with 4, which is what a grown topic looks like."""
    topic = _topic(kafka_broker, 2, "grow")
    base = JobConfig.load("include/jobs/enrichment.yaml").to_dict()
    base.update(
        name="grow-job",
        inputs=[{"system": "kafka", "stream": topic}],
        systems={"kafka": {"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 5000}},
    )
    create_job(home, JobConfig.from_dict(base))
    assert repartition.detect(home, ["grow-job"]) == []
    kafka_broker.recreate_topic(topic, 4)
    (change,) = repartition.detect(home, ["grow-job"])
    assert (change.stream, change.before, change.after, change.error) == (f"kafka/{topic}", 2, 4, None)
    kafka_broker.recreate_topic(topic, 3)
    (change,) = repartition.detect(home, ["grow-job"])
    assert change.after == 3 and "multiple" in (change.error or "")


def test_a_new_partition_is_held_until_its_source_is_read_past_the_point_the_platform_recorded(
    kafka_broker: MockKafka, tmp_path
) -> None:
    """The mock cannot add partitions, so the topic is made again with more (its offsets restart at 0)."""
    from datetime import UTC, datetime, timedelta

    from pipelines.systems.kafka_expansions import ExpansionLog

    home = Home(tmp_path / "home")
    settings = {"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 5000, "expansion_grace_ms": 0}
    kafka = KafkaSystem(settings, home)
    topic = _topic(kafka_broker, 2, "grow")
    assert kafka.read_limits(topic, {0: "0", 1: "0"}) == {}  # first sight: 2 partitions, nothing to hold
    kafka_broker.recreate_topic(topic, 4)
    kafka.produce(topic, [(f"k{i}".encode(), b"v", None) for i in range(40)])
    ends = {p: int(o) for p, o in kafka.end_positions(topic).items()}
    assert ends[0] > 0 and ends[1] > 0
    floors = {p: "0" for p in range(4)}
    assert kafka.read_limits(topic, floors) == {2: None, 3: None}, "sources 0 and 1 are not past the point"
    [expansion] = kafka.describe(topic).expansions
    assert (expansion.from_partitions, expansion.to_partitions) == (2, 4)
    assert expansion.end_offsets == {0: str(ends[0]), 1: str(ends[1])}
    assert kafka.read_limits(topic, {**floors, 0: str(ends[0])}) == {3: None}, "2 mod 2 = 0 is past: 2 is free"
    assert kafka.read_limits(topic, {0: str(ends[0]), 1: str(ends[1]), 2: "0", 3: "0"}) == {}
    kafka.produce(topic, [(b"later", b"v", None)])
    assert [e.end_offsets for e in kafka.describe(topic).expansions] == [expansion.end_offsets], "a point is kept"
    kafka.close()

    # with a grace period, the new partitions are held entirely until it is over, then the point is taken
    log = ExpansionLog(tmp_path / "other", "cluster", "t")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    log.observe(2, lambda: {0: 5, 1: 5}, 60_000, now=t0)
    [pending] = log.observe(4, lambda: {0: 7, 1: 7}, 60_000, now=t0 + timedelta(seconds=1))
    assert log.holds([pending], {0: "100", 1: "100"}, int) == {2, 3}, "no point before the grace period ends"
    [settled] = log.observe(4, lambda: {0: 9, 1: 8}, 60_000, now=t0 + timedelta(seconds=62))
    assert settled.end_offsets == {0: "9", 1: "8"}
    assert log.holds([settled], {0: "9", 1: "7"}, int) == {3}
