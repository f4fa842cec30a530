"""End offsets right after an expansion: a new partition's "Not leader for partition" is asked again, not raised.

The broker state cannot be made on demand (it lasts while the new partition's
leadership spreads, milliseconds on an idle broker; a fresh-clone run met it
once under load), so the admin client here is a stand-in that answers with
the codes librdkafka hands back, as plain ``KafkaError`` codes. The real
broker's side is covered by ``test_kafka.py``'s expansion tests.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipelines.errors import StreamError
from pipelines.systems.kafka.admin import KafkaAdmin
from pipelines.systems.kafka.client import KafkaClients
from pipelines.systems.kafka.settings import KafkaSettings


@dataclass
class _Offset:
    offset: int


class _Admin:
    """Answers ListOffsets from a script: per call, per partition, an offset or an error code."""

    def __init__(self, script: list[dict[int, int | KafkaError]]) -> None:
        self.script = script
        self.asked: list[list[int]] = []

    def poll(self, timeout: float = 0) -> int:  # what the clients' refusal check serves callbacks with
        return 0

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[_Offset]]:
        answers = self.script[min(len(self.asked), len(self.script) - 1)]
        self.asked.append(sorted(tp.partition for tp in request))
        futures: dict[Any, Future[_Offset]] = {}
        for tp in request:
            future: Future[_Offset] = Future()
            answer = answers[tp.partition]
            if isinstance(answer, KafkaError):
                future.set_exception(KafkaException(answer))
            else:
                future.set_result(_Offset(answer))
            futures[tp] = future
        return futures


def _admin(script: list[dict[int, int | KafkaError]], timeout_ms: int = 5000) -> tuple[KafkaAdmin, _Admin]:
    clients = KafkaClients(KafkaSettings(bootstrap_servers="127.0.0.1:9", timeout_ms=timeout_ms))
    stand_in = _Admin(script)
    clients._admin = stand_in  # type: ignore[assignment]
    return KafkaAdmin(clients), stand_in


NOT_LEADER = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)


def test_new_partitions_answering_not_leader_are_asked_again_alone_until_they_answer() -> None:
    admin, stand_in = _admin(
        [
            {0: 10, 1: 12, 2: NOT_LEADER, 3: NOT_LEADER},
            {2: NOT_LEADER, 3: 4},
            {2: 7},
        ]
    )
    assert admin.list_offsets("grow", 4, None) == {0: 10, 1: 12, 2: 7, 3: 4}
    assert stand_in.asked == [[0, 1, 2, 3], [2, 3], [2]]


def test_a_partition_still_not_led_at_the_timeout_is_the_callers_error() -> None:
    admin, stand_in = _admin([{0: 1, 1: NOT_LEADER}], timeout_ms=300)
    with pytest.raises(StreamError, match=r"listing offsets of topic .grow.*Not leader for partition"):
        admin.list_offsets("grow", 2, None)
    assert len(stand_in.asked) >= 2  # asked again before giving up


def test_an_error_that_is_not_about_leadership_is_raised_at_once() -> None:
    admin, stand_in = _admin([{0: 1, 1: KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)}])
    with pytest.raises(StreamError, match="listing offsets of topic 'grow'"):
        admin.list_offsets("grow", 2, None)
    assert stand_in.asked == [[0, 1]]
