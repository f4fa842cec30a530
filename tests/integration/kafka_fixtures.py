"""A real Kafka-protocol broker for the integration suite: librdkafka's mock cluster in a helper process.

One broker per session (it starts in well under a second, but a session of
tests that each make their own topics needs no more); tests that take the
broker down use their own (``MockKafka`` directly). The helper process listens
on 127.0.0.1 only, so Spark's Python workers (other processes) reach it, and
is killed at teardown.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pipelines.systems.kafka_mock import MockKafka


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[MockKafka]:
    broker = MockKafka(brokers=1)
    try:
        yield broker
    finally:
        broker.stop()


def unique_topic(prefix: str = "topic") -> str:
    """Topics outlive a test on a shared broker: each test makes its own."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
