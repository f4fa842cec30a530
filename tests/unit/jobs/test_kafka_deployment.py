"""The docker-compose Kafka service and the job configuration that points at it agree (no Docker needed)."""

from __future__ import annotations

from pathlib import Path

import yaml

from pipelines.jobs.config import JobConfig

ROOT = Path(__file__).resolve().parents[3]


def test_the_compose_kafka_service_is_a_kraft_broker_the_kafka_job_points_at() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}, "KRaft, no ZooKeeper"
    assert str(env["KAFKA_CONTROLLER_QUORUM_VOTERS"]).startswith(f"{env['KAFKA_NODE_ID']}@kafka:")
    assert "kafka-data" in compose["volumes"]

    config = JobConfig.load(str(ROOT / "include/jobs/enrichment-kafka.yaml"))
    assert [s.system for s in config.inputs] == ["kafka"]
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split("://", 1)[1]
    assert config.system_settings("kafka")["bootstrap_servers"] == advertised
