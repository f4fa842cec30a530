"""Inputs as their users know them, against a real Kafka broker: the job's consumer group and its lag."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.observe.systems import inspect_inputs
from pipelines.storage.home import Home
from pipelines.systems.kafka import KafkaSystem
from testbed.servers.kafka_broker import KafkaBroker
from tests.integration.kafka_fixtures import new_topic


def test_kafka_shows_partitions_where_the_job_stands_and_its_consumer_group_lag(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    home = Home(tmp_path / "home")
    topic = new_topic(kafka_broker, 2, "observe")
    settings = {"kafka": {"bootstrap_servers": kafka_broker.bootstrap, "timeout_ms": 5000}}
    system = KafkaSystem(settings["kafka"], home)
    try:
        system.produce(topic, [(f"k{i}".encode(), b"v", None) for i in range(40)])
        ends = {p: int(e) for p, e in system.end_positions(topic).items()}
        system.acknowledge("orders", topic, {0: "2", 1: "0"})  # what the sink does after each batch
    finally:
        system.close()
    # the job's buckets: partition 0's slowest bucket is at 2, partition 1's at 0
    checkpoints = {
        SystemStreamPartition("kafka", topic, 0, 0): "5",
        SystemStreamPartition("kafka", topic, 0, 1): "2",
        SystemStreamPartition("kafka", topic, 1, 0): "0",
        SystemStreamPartition("kafka", topic, 1, 1): "0",
    }
    (view,), held = inspect_inputs(home, "orders", [SystemStream("kafka", topic)], settings, checkpoints)
    assert view["reachable"] is True and held == {}
    assert [(p["partition"], p["checkpoint"], p["records_behind"]) for p in view["partitions"]] == [
        (0, "2", ends[0] - 2),
        (1, "0", ends[1]),
    ]
    group = view["consumer_group"]
    assert group["group"] == "orders" and group["commits_progress"] is True
    assert group["lag"] == ends[0] - 2 + ends[1]
    assert [(r["partition"], r["committed"], r["lag"]) for r in group["partitions"]] == [
        (0, "2", ends[0] - 2),
        (1, "0", ends[1]),
    ]
    assert view["details"]["brokers"] == kafka_broker.bootstrap


def test_an_unreachable_broker_is_shown_as_such_within_the_time_limit(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = {"kafka": {"bootstrap_servers": f"127.0.0.1:{port}", "timeout_ms": 4000}}
    checkpoints = {SystemStreamPartition("kafka", "orders", 0): "0"}
    started = time.monotonic()
    (view,), held = inspect_inputs(
        Home(tmp_path / "home"), "orders", [SystemStream("kafka", "orders")], settings, checkpoints, timeout_s=1.5
    )
    assert time.monotonic() - started < 5.0
    assert view["reachable"] is False and view["error"] and held == {}
    assert (view["input"], view["system"]) == ("kafka.orders", "kafka")
