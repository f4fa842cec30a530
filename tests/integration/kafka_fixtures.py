"""The Kafka broker of the integration suite: one real Apache Kafka broker (KRaft, one node) per session.

It starts once (7-8 s here, a restart 5 s) and every Kafka test makes its own topics on
it. Its PLAINTEXT listener is a super user; its SASL_PLAINTEXT listener knows
one user, ``SASL_USER``, who may use only topics and groups whose names start
with ``SASL_PREFIX`` (ACLs): what the tests of credentials and authorization
need. The user's password is put in the environment when this module is
imported, before the suite's Spark session starts, so Spark's Python workers
find it the way a deployment's executors find theirs (``secrets_env``).

A test that stops the broker starts it again on the same ports before it ends.
The broker listens on 127.0.0.1 only and is killed at the end of the session.
"""

from __future__ import annotations

import os
import secrets
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.servers.kafka_broker import KafkaBroker

SASL_USER = "pipelines-test"
SASL_PREFIX = "sasl-"
SASL_PASSWORD_ENV = "PIPELINES_TEST_KAFKA_PASSWORD"
os.environ.setdefault(SASL_PASSWORD_ENV, secrets.token_hex(8))


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    broker = _started_broker()
    try:
        yield broker
    finally:
        broker.close()


def _started_broker(attempts: int = 2) -> KafkaBroker:
    """A started broker with the SASL user's grants; a failed start is said on stderr and tried once more afresh.

    Fourteen Kafka tests share this fixture, so one failed start (a port taken between picking and binding it,
    the ACL request sent before the authorizer answers on a loaded machine) errors them all; the first failure
    is printed whole, so a CI log shows what it was even when the second attempt succeeds.
    """
    for attempt in range(1, attempts + 1):
        broker = KafkaBroker(sasl_users={SASL_USER: os.environ[SASL_PASSWORD_ENV]})
        try:
            broker.start()
            broker.grant(SASL_USER, SASL_PREFIX)
            return broker
        except Exception as e:
            broker.close()
            print(f"[kafka] start {attempt} of {attempts} failed: {e!r}", file=sys.stderr)
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def unique_topic(prefix: str = "topic") -> str:
    """Topics outlive a test on a shared broker: each test makes its own."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(broker: KafkaBroker, partitions: int, prefix: str = "t") -> str:
    name = unique_topic(prefix)
    broker.create_topic(name, partitions)
    return name


def sasl_settings(broker: KafkaBroker, password_env: str = SASL_PASSWORD_ENV, **more: Any) -> dict[str, Any]:
    """A job's ``systems.kafka`` section for the SASL listener: user in ``properties``, password from the env."""
    assert broker.sasl_bootstrap is not None
    return {
        "bootstrap_servers": broker.sasl_bootstrap,
        "properties": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": SASL_USER},
        "secrets_env": {"sasl.password": password_env},
        **more,
    }
