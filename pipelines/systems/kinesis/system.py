"""``KinesisSystem``: the ``InputSystem`` of Amazon Kinesis Data Streams, put together from its roles.

Each role is a module of this package: ``client`` (boto3, retries, limits),
``admin`` (listings, plans, resharding, lineage), ``reader`` (a slot's
records), ``audit`` (what was read, for the checks), ``producer``. This class
holds them and answers the protocol; it is what the registry opens and what
executors unpickle (only the settings travel). Besides ``InputSystem`` it is
``SupportsRelayout``, ``SupportsRecordsRead`` and ``SupportsLineage``
(``pipelines.systems.base``). See docs/systems/kinesis.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.systems.base import ComposedSystem, Position, Positions, StreamMetadata
from pipelines.systems.kinesis.admin import KinesisAdmin
from pipelines.systems.kinesis.audit import KinesisAudit
from pipelines.systems.kinesis.client import KinesisClient
from pipelines.systems.kinesis.positions import SYSTEM, position_key
from pipelines.systems.kinesis.producer import KinesisProducer
from pipelines.systems.kinesis.reader import KinesisReader
from pipelines.systems.kinesis.settings import KinesisSettings, validate_settings


class KinesisSystem(ComposedSystem):
    """Admin, consumer and producer of Kinesis streams in one region/endpoint (docs/systems/kinesis.md)."""

    system: str = SYSTEM
    admin: KinesisAdmin
    reader: KinesisReader
    producer: KinesisProducer

    def __init__(self, settings: Mapping[str, Any] | KinesisSettings | None = None, home: Any = None) -> None:
        self._open(validate_settings(settings, "systems.kinesis"), home)

    def _open(self, settings: KinesisSettings, home: Any) -> None:
        self.settings = settings
        self.home = home
        self._client = KinesisClient(self.settings)
        self.admin = KinesisAdmin(self._client)
        self.reader = KinesisReader(self._client, self.admin)
        self._audit = KinesisAudit(self._client, self.admin)
        self.producer = KinesisProducer(self._client, self.admin)

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "home": self.home}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._open(state["settings"], state["home"])

    def __repr__(self) -> str:
        where = self.settings.endpoint_url or self.settings.region or "default region"
        return f"KinesisSystem({where})"

    def connect(self) -> None:
        """This process's boto3 client: about half a second of botocore's service model, loaded once."""
        _ = self._client.api  # made on first use, kept for this process

    @property
    def client(self) -> Any:
        """This process's boto3 Kinesis client for these settings (tests stub it with botocore's ``Stubber``)."""
        return self._client.api

    # ---------------------------------------------------------------- admin (driver, operations)

    def positions_at(self, stream: str, at_ms: int) -> dict[int, Position]:
        return self.admin.positions_at(stream, at_ms)

    def position_key(self, position: Position) -> Any:
        return position_key(position)

    def reached(self, stream: str, partition: int, position: Position, target: Position) -> bool:
        return self.admin.reached(stream, partition, position, target)

    def unread(self, stream: str, partition: int, records: Sequence[Position], position: Position) -> list[bool]:
        return self.admin.unread(stream, partition, records, position)

    def retention(self, stream: str) -> int | None:
        return self.admin.retention(stream)

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata:
        return self.admin.set_retention(stream, retention_ms)

    # ---------------------------------------------------------------- optional abilities

    def relayout(self, stream: str, positions: Mapping[int, Position], partitions: int) -> dict[int, Position]:
        return self.admin.relayout(stream, positions, partitions)

    def lineage(self, stream: str, positions: Mapping[int, Position]) -> dict[str, dict[str, Any]]:
        return self.admin.lineage(stream, positions)

    def records_read(
        self, stream: str, starts: Mapping[int, Position], ends: Mapping[int, Position]
    ) -> list[tuple[int | None, Position]]:
        return self._audit.records_read(stream, starts, ends)

    def records_read_keyed(
        self, stream: str, starts: Mapping[int, Position], ends: Mapping[int, Position]
    ) -> list[tuple[int | None, Position, bytes]]:
        return self._audit.records_read_keyed(stream, starts, ends)

    # ---------------------------------------------------------------- resharding (tests, demos)

    def open_shards(self, stream: str) -> list[str]:
        return self.admin.open_shards(stream)

    def split_shard(self, stream: str, shard: str, new_starting_hash_key: int | None = None) -> list[str]:
        return self.admin.split_shard(stream, shard, new_starting_hash_key)

    def merge_shards(self, stream: str, shard: str, adjacent: str) -> str:
        return self.admin.merge_shards(stream, shard, adjacent)

    def delete(self, stream: str) -> None:
        self.admin.delete(stream)

    # ---------------------------------------------------------------- consumer (executors)

    def acknowledge(self, job: str, stream: str, positions: Positions) -> None:
        """Nothing: checkpoints live in the platform's Delta tables; the job model assigns shards, no KCL leases."""

    def close(self) -> None:
        """Forget cached listings; clients, iterators and limiters are per process and shared, so they stay."""
        self.admin.forget()
