"""``KafkaSystem``: Kafka as an ``InputSystem`` over ``confluent-kafka`` (librdkafka), put together from its roles.

Spark's own Kafka source is a Maven artifact and cannot split a partition by
key, so jobs read Kafka through this package from the Python data source.
Each role is a module: ``client`` (the process's clients and their errors),
``admin`` (metadata, ends, plans, topics), ``reader``, ``progress`` (the
consumer group mirror), ``producer``. This class holds them and answers the
protocol; it is what the registry opens and what executors unpickle (only
the settings travel). See docs/systems/kafka.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.systems.base import ComposedSystem, Position, Positions, StreamMetadata
from pipelines.systems.kafka.admin import KafkaAdmin
from pipelines.systems.kafka.client import KafkaClients
from pipelines.systems.kafka.positions import SYSTEM
from pipelines.systems.kafka.producer import KafkaProducer
from pipelines.systems.kafka.progress import KafkaProgress
from pipelines.systems.kafka.reader import KafkaReader
from pipelines.systems.kafka.settings import validate_settings
from pipelines.systems.offsets import OffsetOrder


class KafkaSystem(OffsetOrder, ComposedSystem):
    """Kafka as an ``InputSystem``; clients are made on first use and are per process (it pickles to settings)."""

    system: str = SYSTEM
    admin: KafkaAdmin
    reader: KafkaReader
    producer: KafkaProducer

    def __init__(self, settings: Mapping[str, Any], home: Any = None) -> None:
        """``home`` (a ``Home``) keeps the expansions this platform observed; without it nothing is held back."""
        self._raw = dict(settings)
        self.home = home
        self.settings = validate_settings(settings)
        self.brokers = self.settings.bootstrap_servers
        self.clients = KafkaClients(self.settings)
        self.admin = KafkaAdmin(self.clients, home)
        self.reader = KafkaReader(self.clients)
        self._progress = KafkaProgress(self.clients, self.admin)
        self.producer = KafkaProducer(self.clients)

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self._raw, "home": self.home}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state.get("home"))  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"KafkaSystem({self.brokers!r})"

    # ----------------------------------------------------------------- admin

    def partition_count(self, stream: str) -> int:
        """The topic's partition count from the cluster's metadata; unknown topics and dead brokers are errors."""
        return self.admin.partition_count(stream)

    def positions_at(self, stream: str, at_ms: int) -> dict[int, Position]:
        return self.admin.positions_at(stream, at_ms)

    def identity(self, stream: str) -> str:
        return self.admin.identity(stream)

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata:
        return self.admin.set_retention(stream, retention_ms)

    def retention(self, stream: str) -> int | None:
        return self.admin.retention(stream)

    # -------------------------------------------------------------- consumer

    def acknowledge(self, job: str, stream: str, positions: Positions) -> None:
        """Commit the job's floors to its consumer group, so Kafka's lag tools see its progress."""
        self._progress.acknowledge(job, stream, positions)

    def committed(self, group: str, stream: str) -> dict[int, Position]:
        """What a consumer group has committed on a topic (what lag tools read); partitions without a commit omitted."""
        return self._progress.committed(group, stream)

    def connect(self) -> None:
        """The admin client, which starts bootstrapping from the brokers in librdkafka's own threads."""
        self.clients.admin()

    def close(self) -> None:
        self.clients.close()
