"""An admin client that stopped being answered is made again, so a broker restart cannot leave a job stuck on it.

librdkafka's admin client can stay "waiting for controller" after a broker restart (a fresh-clone run saw a job's
identity check fail that way for 164 s after the broker was back). The state cannot be made on demand, so the
clients here are stand-ins that answer as librdkafka does; the real broker's restart is
``test_kafka_job.py``'s outage test.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipelines.errors import StreamError
from pipelines.systems.kafka import client as client_module
from pipelines.systems.kafka.admin import KafkaAdmin
from pipelines.systems.kafka.client import KafkaClients
from pipelines.systems.kafka.settings import KafkaSettings


class _Description:
    topic_id = "AAAAAAAAAAAAAAAAAAAAAA"


class _StandIn:
    """An admin client: the first one made is stuck waiting for the controller, every later one answers."""

    made: ClassVar[list[_StandIn]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.stuck = not _StandIn.made
        _StandIn.made.append(self)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def describe_topics(self, topics: Any, **_: Any) -> dict[str, Future[_Description]]:
        (name,) = topics.topic_names
        future: Future[_Description] = Future()
        if self.stuck:
            error = KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out")
            future.set_exception(KafkaException(error))
        else:
            future.set_result(_Description())
        return {name: future}


def test_an_admin_client_stuck_waiting_for_the_controller_is_made_again_for_the_next_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_StandIn, "made", [])
    monkeypatch.setattr(client_module, "AdminClient", _StandIn)
    clients = KafkaClients(KafkaSettings(bootstrap_servers="127.0.0.1:9", timeout_ms=300))
    admin = KafkaAdmin(clients)
    with pytest.raises(StreamError, match=r"did not answer within 300 ms while describing topic 'events'"):
        admin.identity("events")
    assert admin.identity("events") == "AAAAAAAAAAAAAAAAAAAAAA", "the next request goes to a new client"
    assert len(_StandIn.made) == 2
    assert admin.identity("events") == "AAAAAAAAAAAAAAAAAAAAAA"
    assert len(_StandIn.made) == 2, "a client that answers is kept"


def test_an_unanswered_request_of_any_client_makes_the_admin_client_again() -> None:
    clients = KafkaClients(KafkaSettings(bootstrap_servers="127.0.0.1:9", timeout_ms=300))
    first = clients.admin()
    refused = clients.error("listing offsets", KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert "refused" in str(refused) and clients.admin() is first, "an answer, even a refusal, keeps the client"
    for code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN):
        unanswered = clients.error("listing offsets", KafkaException(KafkaError(code)))
        assert "did not answer" in str(unanswered)
        assert clients.admin() is not first
        first = clients.admin()
