"""Kafka as an input system against a real Apache Kafka broker (KRaft, one node, started by the test session).

Everything here is Kafka's own behaviour: topics made and grown by request
(``CreateTopics``, ``CreatePartitions``), transactions whose aborted records a
read-committed reader never sees and whose open ones hold the last stable
offset back, consumer-group commits, SASL logins and ACL refusals.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from pipelines.core.partitioner import kafka_partition
from pipelines.core.segments import RETAIN_FOREVER
from pipelines.errors import ConfigError, PartitionChangeError, StreamError
from pipelines.jobs.config import JobConfig
from pipelines.operations import repartition
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home
from pipelines.systems.base import Bounded, InputSystem, SupportsCommitted, SupportsIdentity, SupportsStartAtTime
from pipelines.systems.kafka import KafkaSystem, position_key, validate_settings
from pipelines.systems.kafka.expansions import ExpansionLog
from testbed.servers.kafka_broker import KafkaBroker
from tests.integration.kafka_fixtures import SASL_PASSWORD_ENV, SASL_PREFIX, new_topic, sasl_settings, unique_topic
from tests.integration.systems.contract import check_input_system_contract

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def kafka(kafka_broker: KafkaBroker) -> Iterator[KafkaSystem]:
    system = KafkaSystem({"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 5000, "read_timeout_ms": 5000})
    yield system
    system.close()


def test_kafka_keeps_the_input_system_contract(kafka_broker: KafkaBroker, kafka: KafkaSystem) -> None:
    assert isinstance(kafka, InputSystem)
    check_input_system_contract(
        kafka,
        new_topic(kafka_broker, 3),
        abilities=frozenset({SupportsCommitted, SupportsStartAtTime, SupportsIdentity}),
    )


def test_keys_land_where_java_producers_put_them_and_records_keep_key_timestamp_headers(
    kafka_broker: KafkaBroker, kafka: KafkaSystem
) -> None:
    topic = new_topic(kafka_broker, 4)
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


def _transactions(producer: Producer, topic: str, plan: list[tuple[str, int, bool]]) -> None:
    for name, count, commit in plan:
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, key=b"k", value=f"{name}{i}".encode(), partition=0)
        producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)


def _end_once_marked(kafka: KafkaSystem, topic: str, expected: str, timeout: float = 30.0) -> str:
    """Partition 0's end once the last transaction's marker is written: a commit returns once the coordinator has
    logged it, and the partition's leader writes the marker (moving the last stable offset) just after."""
    deadline = time.monotonic() + timeout
    while (end := kafka.end_positions(topic)[0]) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return end


def test_reads_skip_aborted_transactions_complete_across_markers_and_stop_at_the_last_stable_offset(
    kafka_broker: KafkaBroker, kafka: KafkaSystem
) -> None:
    """One partition: committed a0-a4 (offsets 0-4, marker 5), aborted x0-x2 (6-8, marker 9), committed b0-b1
    (10-11, marker 12)."""
    topic = new_topic(kafka_broker, 1, "txn")
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    _transactions(producer, topic, [("a", 5, True), ("x", 3, False), ("b", 2, True)])
    end = _end_once_marked(kafka, topic, "13")
    whole = kafka.read(topic, 0, "0", end)
    offsets = [int(o) for o in whole.records.column("offset").to_pylist()]
    values = [v.decode() for v in whole.records.column("value").to_pylist()]
    # 7 records in 13 offsets: the broker filters the aborted transaction, markers are gaps no record fills.
    assert int(end) == 13
    assert offsets == [0, 1, 2, 3, 4, 10, 11]
    assert values == ["a0", "a1", "a2", "a3", "a4", "b0", "b1"]
    # The range ends after a trailing commit marker: it completes, and the next position is the end (not 11+1=12).
    assert whole.next_position == end
    # A range ending on the first marker (offset 5) completes with the first transaction only.
    first = kafka.read(topic, 0, "0", "6")
    assert first.records.column("value").to_pylist() == [b"a0", b"a1", b"a2", b"a3", b"a4"]
    assert first.next_position == "6"
    # Starting on a marker, across the aborted records, reads on from the next committed record.
    assert kafka.read(topic, 0, "5", "11").records.column("offset").to_pylist() == ["10"]
    # A range holding only aborted records and markers completes, empty.
    assert kafka.read(topic, 0, "5", "10").records.num_rows == 0
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

    # An open transaction holds the last stable offset back: its records are neither counted nor read.
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"open0", partition=0)
    producer.produce(topic, key=b"k", value=b"open1", partition=0)
    producer.flush(10)
    assert kafka.end_positions(topic)[0] == end
    assert kafka.read(topic, 0, "0", end).records.num_rows == 7
    producer.commit_transaction(10)
    assert _end_once_marked(kafka, topic, "16") == "16"  # two records and their commit marker
    assert kafka.read(topic, 0, end, "16").records.column("value").to_pylist() == [b"open0", b"open1"]


def test_a_read_of_records_not_yet_written_times_out_with_a_clear_error(kafka_broker: KafkaBroker) -> None:
    topic = new_topic(kafka_broker, 1)
    system = KafkaSystem({"bootstrap_servers": kafka_broker.bootstrap, "read_timeout_ms": 500})
    try:
        system.produce(topic, [(b"k", b"v", None)])
        with pytest.raises(StreamError, match=rf"{topic}.*partition 0.*did not reach offset 5 within 500 ms"):
            system.read(topic, 0, "0", "5")
    finally:
        system.close()


def test_unknown_topics_and_topics_the_acls_refuse_name_the_topic_and_brokers(
    kafka_broker: KafkaBroker, kafka: KafkaSystem
) -> None:
    with pytest.raises(StreamError, match=rf"topic 'no-such-topic' does not exist on {kafka_broker.bootstrap}"):
        kafka.describe("no-such-topic")
    with pytest.raises(StreamError, match="does not exist"):
        kafka.end_positions("no-such-topic")
    # Describing must not have created it (brokers auto-create topics on metadata requests by default).
    with pytest.raises(StreamError, match="does not exist"):
        kafka.describe("no-such-topic")
    # The SASL user's ACLs cover only topics named sasl-*: the broker refuses to describe any other.
    secret = new_topic(kafka_broker, 1, "acl")
    user = KafkaSystem(sasl_settings(kafka_broker, timeout_ms=5000))
    try:
        with pytest.raises(
            StreamError, match=rf"not authorized to describe Kafka topic '{secret}' on {kafka_broker.sasl_bootstrap}"
        ):
            user.describe(secret)
    finally:
        user.close()
    assert kafka.describe(secret).partition_count == 1  # the super user (PLAINTEXT) still may


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


def test_the_sasl_listener_serves_a_job_s_settings_and_a_wrong_password_is_one_clear_line(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """The connection settings a job gives (user in ``properties``, password from ``secrets_env``) log in over
    SASL/PLAIN; a wrong password is refused at once, in one line naming the brokers and the refusal."""
    topic = new_topic(kafka_broker, 2, SASL_PREFIX.rstrip("-"))
    system = KafkaSystem(sasl_settings(kafka_broker, timeout_ms=5000, read_timeout_ms=5000))
    try:
        placed = system.produce(topic, [(f"k{i}".encode(), b"v", None) for i in range(20)])
        ends = system.end_positions(topic)
        assert sum(system.read(topic, p, "0", e).records.num_rows for p, e in ends.items()) == len(placed) == 20
        system.acknowledge(f"{SASL_PREFIX}job", topic, ends)
        assert system.committed(f"{SASL_PREFIX}job", topic) == ends
    finally:
        system.close()

    wrong = KafkaSystem(sasl_settings(kafka_broker, password_env="PIPELINES_TEST_WRONG_PASSWORD", timeout_ms=8000))
    os.environ["PIPELINES_TEST_WRONG_PASSWORD"] = "not-" + os.environ[SASL_PASSWORD_ENV]
    started = time.monotonic()
    try:
        with pytest.raises(StreamError) as refused:
            wrong.describe(topic)
    finally:
        wrong.close()
        del os.environ["PIPELINES_TEST_WRONG_PASSWORD"]
    assert time.monotonic() - started < 4, "refused at the first answer, not after the 8 s timeout"
    assert str(refused.value).startswith(f"Kafka brokers {kafka_broker.sasl_bootstrap} refused the connection")
    assert "Authentication failed: Invalid username or password" in str(refused.value)

    # The same on the command line: exit 2 and exactly one line on stderr (librdkafka's own log stays out of it).
    settings = json.dumps(sasl_settings(kafka_broker, password_env="PIPELINES_TEST_WRONG_PASSWORD"))
    env = {**os.environ, "PIPELINES_TEST_WRONG_PASSWORD": "wrong"}
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "stream", "describe", topic, "--system", "kafka", "--settings", settings],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "PIPELINES_HOME": str(tmp_path / "home")},
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: Kafka brokers {kafka_broker.sasl_bootstrap} refused the connection while describing topic "
        f"'{topic}': SASL authentication error: Authentication failed: Invalid username or password; check "
        "systems.kafka.properties (security.protocol, sasl.mechanism, sasl.username, ssl.*) and the secrets in "
        "systems.kafka.secrets_env / connection_id"
    ]
    assert done.stdout == ""


def test_acknowledge_commits_the_job_floors_to_its_consumer_group(
    kafka_broker: KafkaBroker, kafka: KafkaSystem
) -> None:
    topic = new_topic(kafka_broker, 2)
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


def test_topics_are_created_and_grown_by_request_and_a_bad_count_is_refused_first(
    kafka_broker: KafkaBroker, kafka: KafkaSystem
) -> None:
    topic = unique_topic("made")
    assert kafka.create(topic, 2).partition_count == 2
    with pytest.raises(StreamError, match=rf"topic '{topic}' already exists on {kafka_broker.bootstrap}"):
        kafka.create(topic, 2)
    with pytest.raises(PartitionChangeError, match="never removed"):
        kafka.expand(topic, 1)
    with pytest.raises(PartitionChangeError, match="multiple"):
        kafka.expand(topic, 3)
    assert kafka.expand(topic, 2).partition_count == 2
    with pytest.raises(ConfigError):
        kafka.expand(topic, 0)
    kafka.produce(topic, [(f"k{i}".encode(), b"v", None) for i in range(20)])
    ends = kafka.end_positions(topic)
    grown = kafka.expand(topic, 4)  # CreatePartitions on the live topic: old partitions keep their records
    assert grown.partition_count == 4
    assert {p: m.end for p, m in grown.partitions.items()} == {**ends, 2: "0", 3: "0"}


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state"])
def test_the_topics_kafka_keeps_for_itself_are_not_created_grown_or_altered(kafka: KafkaSystem, topic: str) -> None:
    """Kafka's brokers let an admin client do all three; a one-partition ``__consumer_offsets`` without
    compaction, or one grown under live groups, breaks every consumer group of the cluster."""
    admin = kafka.clients.admin()
    before = admin.list_topics(timeout=10).topics
    for refused in (
        lambda: kafka.create(topic, 1),
        lambda: kafka.expand(topic, 64),
        lambda: kafka.set_retention(topic, 60_000),
    ):
        with pytest.raises(ConfigError, match=f"'{topic}' is one of the topics Kafka keeps for itself"):
            refused()
    after = admin.list_topics(timeout=10).topics
    assert set(after) == set(before)
    if topic in after:
        assert len(after[topic].partitions) == len(before[topic].partitions)


def test_a_topics_retention_ms_is_set_at_creation_altered_and_deleted_as_kafka_configs_does(
    kafka_broker: KafkaBroker, kafka: KafkaSystem, tmp_path: Path
) -> None:
    def topic_config(topic: str) -> tuple[str, bool]:
        """What Kafka's own admin API says: retention.ms, and whether it is the broker's (no topic override)."""
        resource = ConfigResource(ResourceType.TOPIC, topic)
        admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
        entry = admin.describe_configs([resource])[resource].result()["retention.ms"]
        return entry.value, entry.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    topic = unique_topic("kept")
    assert kafka.create(topic, 2, 3 * 86_400_000).partition_count == 2
    assert kafka.retention(topic) == 3 * 86_400_000
    assert topic_config(topic) == (str(3 * 86_400_000), False)
    assert kafka.set_retention(topic, RETAIN_FOREVER).partition_count == 2
    assert topic_config(topic) == ("-1", False) and kafka.retention(topic) == RETAIN_FOREVER
    kafka.set_retention(topic, None)  # kafka-configs --delete-config retention.ms: the broker's again
    assert topic_config(topic)[1] and kafka.retention(topic) is None
    with pytest.raises(StreamError, match="does not exist"):
        kafka.set_retention(unique_topic("missing"), 1000)

    # The command line, as an operator used to kafka-configs.sh would use it.
    settings = json.dumps({"bootstrap_servers": kafka_broker.bootstrap})
    env = {**os.environ, "PIPELINES_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pipelines", *args, "--system", "kafka", "--settings", settings]
        return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)

    assert "retention 12h" in cli("stream", "alter", topic, "--retention", "12h").stdout
    assert topic_config(topic) == (str(12 * 3_600_000), False)
    shown = cli("stream", "alter", topic, "--retention", "default").stdout
    assert "retention default (the broker's log.retention.*)" in shown, shown
    assert json.loads(cli("stream", "describe", topic, "--json").stdout)["details"]["retention_ms"] is None
    refused = cli("stream", "alter", "no-such-topic", "--retention", "1d")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith(f"error: Kafka topic 'no-such-topic' does not exist on {kafka_broker.bootstrap}")


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
        system.clients.conf()
    monkeypatch.setenv("KAFKA_TEST_PASSWORD", "hunter2")
    assert system.clients.conf()["sasl.password"] == "hunter2"
    connection = '{"conn_type": "kafka", "extra": {"sasl.username": "svc", "sasl.password": "s3"}}'
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", connection)
    conf = KafkaSystem({"bootstrap_servers": "x:9092", "connection_id": "kafka_prod"}).clients.conf()
    assert (conf["sasl.username"], conf["sasl.password"], conf["bootstrap.servers"]) == ("svc", "s3", "x:9092")
    assert "s3" not in repr(KafkaSystem({"bootstrap_servers": "x:9092", "connection_id": "kafka_prod"}).__getstate__())
    assert os.environ["KAFKA_TEST_PASSWORD"] == "hunter2"


def test_positions_are_offsets_ordered_as_numbers() -> None:
    assert position_key("10") > position_key("9")
    with pytest.raises(StreamError, match="decimal"):
        position_key("abc")
    with pytest.raises(StreamError, match=">= 0"):
        position_key("-1")


def test_the_repartition_watch_sees_partitions_added_to_a_live_topic(kafka_broker: KafkaBroker, home: Home) -> None:
    topic = new_topic(kafka_broker, 2, "grow")
    base = JobConfig.load("include/jobs/enrichment.yaml").to_dict()
    base.update(
        name="grow-job",
        inputs=[{"system": "kafka", "stream": topic}],
        systems={"kafka": {"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 5000}},
    )
    create_job(home, JobConfig.from_dict(base))
    assert repartition.detect(home, ["grow-job"]) == []
    kafka_broker.create_partitions(topic, 3)  # grown by someone else, to a count the job cannot absorb
    (change,) = repartition.detect(home, ["grow-job"])
    assert (change.stream, change.before, change.after) == (f"kafka/{topic}", 2, 3)
    assert "multiple" in (change.error or "")
    other = new_topic(kafka_broker, 2, "grow")
    base.update(
        name="grow-job-2",
        inputs=[{"system": "kafka", "stream": other}],
        sink={"table": "grow_2"},
        dead_letter={"table": "grow_2_dead"},
    )
    create_job(home, JobConfig.from_dict(base))
    kafka_broker.create_partitions(other, 4)
    (change,) = repartition.detect(home, ["grow-job-2"])
    assert (change.stream, change.before, change.after, change.error) == (f"kafka/{other}", 2, 4, None)


def test_a_new_partition_is_held_until_its_source_is_read_past_the_point_the_platform_recorded(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    home = Home(tmp_path / "home")
    settings = {"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 5000, "expansion_grace_ms": 0}
    kafka = KafkaSystem(settings, home)
    topic = new_topic(kafka_broker, 2, "grow")
    kafka.produce(topic, [(f"a{i}".encode(), b"v", None) for i in range(20)])
    assert kafka.read_limits(topic, {0: "0", 1: "0"}) == {}  # first sight: 2 partitions, nothing to hold
    kafka_broker.create_partitions(topic, 4)
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
