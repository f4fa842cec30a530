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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipelines.systems.base import End, Position, ReadResult, Record, StreamMetadata
from pipelines.systems.kinesis.admin import KinesisAdmin
from pipelines.systems.kinesis.audit import KinesisAudit
from pipelines.systems.kinesis.client import KinesisClient
from pipelines.systems.kinesis.positions import SYSTEM, position_key
from pipelines.systems.kinesis.producer import KinesisProducer
from pipelines.systems.kinesis.reader import KinesisReader
from pipelines.systems.kinesis.settings import KinesisSettings, validate_settings


class KinesisSystem:
    """Admin, consumer and producer of Kinesis streams in one region/endpoint (docs/systems/kinesis.md)."""

    system: str = SYSTEM

    def __init__(self, settings: Mapping[str, Any] | KinesisSettings | None = None, home: Any = None) -> None:
        self._open(validate_settings(settings, "systems.kinesis"), home)

    def _open(self, settings: KinesisSettings, home: Any) -> None:
        self.settings = settings
        self.home = home
        self._client = KinesisClient(self.settings)
        self.admin = KinesisAdmin(self._client)
        self._reader = KinesisReader(self._client, self.admin)
        self._audit = KinesisAudit(self._client, self.admin)
        self._producer = KinesisProducer(self._client, self.admin)

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "home": self.home}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._open(state["settings"], state["home"])

    def __repr__(self) -> str:
        where = self.settings.endpoint_url or self.settings.region or "default region"
        return f"KinesisSystem({where})"

    @property
    def client(self) -> Any:
        """This process's boto3 Kinesis client for these settings (tests stub it with botocore's ``Stubber``)."""
        return self._client.api

    # ---------------------------------------------------------------- admin (driver, operations)

    def describe(self, stream: str) -> StreamMetadata:
        return self.admin.describe(stream)

    def end_positions(self, stream: str) -> dict[int, Position]:
        return self.admin.end_positions(stream)

    def positions_at(self, stream: str, at_ms: int) -> dict[int, Position]:
        return self.admin.positions_at(stream, at_ms)

    def position_key(self, position: Position) -> Any:
        return position_key(position)

    def reached(self, stream: str, partition: int, position: Position, target: Position) -> bool:
        return self.admin.reached(stream, partition, position, target)

    def unread(self, stream: str, partition: int, records: Sequence[Position], position: Position) -> list[bool]:
        return self.admin.unread(stream, partition, records, position)

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int | None:
        return self.admin.records_between(stream, partition, start, end)

    def read_limits(self, stream: str, floors: Mapping[int, Position]) -> dict[int, Position | None]:
        return self.admin.read_limits(stream, floors)

    def advance(
        self,
        stream: str,
        floors: Mapping[int, Position],
        records: Mapping[int, int],
        limits: Mapping[int, Position],
    ) -> dict[int, End]:
        return self.admin.advance(stream, floors, records, limits)

    def create(self, stream: str, partitions: int, retention_ms: int | None = None) -> StreamMetadata:
        return self.admin.create(stream, partitions, retention_ms)

    def retention(self, stream: str) -> int | None:
        return self.admin.retention(stream)

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata:
        return self.admin.set_retention(stream, retention_ms)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        return self.admin.expand(stream, partitions)

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

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        return self._reader.read(stream, partition, start, end, columns=columns)

    def acknowledge(self, job: str, stream: str, positions: Mapping[int, Position]) -> None:
        """Nothing: checkpoints live in the platform's Delta tables; the job model assigns shards, no KCL leases."""

    # ---------------------------------------------------------------- producer (tests, demos)

    def produce(self, stream: str, records: Iterable[Record]) -> list[tuple[int, Position]]:
        return self._producer.produce(stream, records)

    def close(self) -> None:
        """Forget cached listings; clients, iterators and limiters are per process and shared, so they stay."""
        self.admin.forget()
