"""A topic's new ``retention.ms`` is read back until a broker shows it, and a broker that never does is named.

Under KRaft the controller answers ``IncrementalAlterConfigs`` once the change
is committed, and a broker applies it when it replays the metadata log; a
fresh-clone run under load once read the old value right after the answer.
That window cannot be opened on demand on a real broker, so the admin client
here is a stand-in answering ``DescribeConfigs`` from a script, as librdkafka
hands the entries back. The real broker's side is ``test_kafka.py``'s
retention test.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka.admin import ConfigEntry, ConfigSource  # type: ignore[attr-defined]  # no 'as' re-export

from pipelines.errors import StreamError
from pipelines.systems.kafka.admin import RETENTION_MS, KafkaAdmin
from pipelines.systems.kafka.client import KafkaClients
from pipelines.systems.kafka.settings import KafkaSettings


class _Admin:
    """Answers DescribeConfigs from a script: per call, the topic's own retention.ms or None (the broker's)."""

    def __init__(self, script: list[int | None]) -> None:
        self.script = script
        self.asked = 0

    def poll(self, timeout: float = 0) -> int:  # what the clients' refusal check serves callbacks with
        return 0

    def describe_configs(self, resources: list[Any], **_: Any) -> dict[Any, Future[dict[str, ConfigEntry]]]:
        shown = self.script[min(self.asked, len(self.script) - 1)]
        self.asked += 1
        entry = (
            ConfigEntry(RETENTION_MS, "604800000", source=ConfigSource.DEFAULT_CONFIG)
            if shown is None
            else ConfigEntry(RETENTION_MS, str(shown), source=ConfigSource.DYNAMIC_TOPIC_CONFIG)
        )
        future: Future[dict[str, ConfigEntry]] = Future()
        future.set_result({RETENTION_MS: entry})
        return {resources[0]: future}


def _admin(script: list[int | None], timeout_ms: int = 5000) -> tuple[KafkaAdmin, _Admin]:
    clients = KafkaClients(KafkaSettings(bootstrap_servers="127.0.0.1:9", timeout_ms=timeout_ms))
    stand_in = _Admin(script)
    clients._admin = stand_in  # type: ignore[assignment]
    return KafkaAdmin(clients), stand_in


@pytest.mark.parametrize(("script", "wanted"), [([3_600_000, 3_600_000, 60_000], 60_000), ([60_000, None], None)])
def test_the_new_retention_is_read_back_until_a_broker_shows_it(script: list[int | None], wanted: int | None) -> None:
    admin, stand_in = _admin(script)
    admin._wait_for_retention("orders", wanted)
    assert stand_in.asked == len(script)


def test_a_broker_that_never_shows_the_change_is_an_error_that_says_it_is_committed_and_what_to_check() -> None:
    admin, stand_in = _admin([3_600_000], timeout_ms=300)
    with pytest.raises(StreamError) as raised:
        admin._wait_for_retention("orders", 60_000)
    message = str(raised.value)
    assert "'orders'" in message and "retention.ms 60000" in message and "still showed 3600000" in message
    assert "after 300 ms" in message and "committed" in message and "timeout_ms" in message
    assert stand_in.asked >= 3  # asked again every 0.1 s until the timeout, not once
