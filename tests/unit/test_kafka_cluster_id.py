"""The test broker's cluster id: what ``kafka-storage random-uuid`` prints, never read as an option."""

from __future__ import annotations

import base64

import pytest

from testbed.servers.kafka_broker import _cluster_id

pytestmark = pytest.mark.unit


def test_a_cluster_id_is_16_bytes_in_url_safe_base64_and_never_starts_with_a_dash() -> None:
    ids = [_cluster_id() for _ in range(2000)]  # one draw in 64 started with "-" before: kafka-storage refused it
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 and len(i) == 22 for i in ids)
    assert len(set(ids)) == len(ids)
