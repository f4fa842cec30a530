"""The driver's side of Kafka: topic metadata, end offsets, batch plans, and creating and growing topics.

Ends are the last stable offset (``ListOffsets`` with ``READ_COMMITTED``), so
a micro-batch never waits on an open transaction. New partitions of an
expansion are held back until their source partition is past the expansion
point this platform recorded (``expansions``). Topics grow only by a multiple
of their count, so every key moves from p only to p' with p' mod n == p.
See docs/systems/kafka.md, "Ends" and "Partition expansion".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # no 'as' re-export
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from pipelines.core.groupers import check_growth
from pipelines.core.limits import check_partition_count
from pipelines.core.segments import valid_retention
from pipelines.errors import ConfigError, StreamError
from pipelines.systems.base import End, PartitionMetadata, Position, Positions, StreamMetadata
from pipelines.systems.kafka.client import KafkaClients
from pipelines.systems.kafka.expansions import ExpansionLog
from pipelines.systems.kafka.positions import SYSTEM, offset

RETENTION_MS = "retention.ms"
_TOPIC_CONFIG = ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # a topic's own setting, not the broker's default
INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__remote_log_metadata", "__cluster_metadata"}
)
"""The topics Kafka keeps for itself. Its brokers let an admin client create them and add partitions to them:
``stream create __consumer_offsets --partitions 1`` made the group coordinator's topic with one partition and
without its ``cleanup.policy=compact``, and adding partitions moves every consumer group to another coordinator
partition, leaving their committed offsets behind. Reading one as input stays allowed."""

# Untyped classmethods, each returning one shared spec.
_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]

# A partition's ListOffsets answers that Kafka's admin client retries after refreshing its metadata (its
# ListOffsetsHandler): the partition's leadership is moving or not yet known, as right after an expansion.
# librdkafka hands them back as plain codes, never flagged retriable.
_RETRY_OFFSETS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
    }
)


class KafkaAdmin:
    """Answers the admin questions of ``InputSystem`` for one cluster; ``home`` keeps the expansions observed."""

    def __init__(self, clients: KafkaClients, home: Any = None) -> None:
        self.clients = clients
        self.home = home
        self.brokers = clients.brokers

    def partition_count(self, stream: str) -> int:
        """The topic's partition count from the cluster's metadata; unknown topics and dead brokers are errors."""
        return self.metadata(stream)[0]

    def metadata(self, stream: str) -> tuple[int, str]:
        """(partition count, cluster id) of a topic; asked in slices of at most 1 s, so a refused login ends it."""
        admin = self.clients.admin()
        doing = f"describing topic {stream!r}"
        deadline = time.monotonic() + self.clients.timeout_s
        while True:
            try:
                meta = admin.list_topics(topic=stream, timeout=max(0.05, min(1.0, deadline - time.monotonic())))
                break
            except KafkaException as error:
                refused = self.clients.refusal(doing)
                if refused is not None:
                    raise refused from None
                if time.monotonic() >= deadline:
                    raise self.clients.error(doing, error) from None
        topic = meta.topics.get(stream)
        if topic is None:
            raise StreamError(f"Kafka topic {stream!r} is missing from the metadata of {self.brokers}")
        if topic.error is not None:
            raise self.clients.topic_error(stream, topic.error)
        return len(topic.partitions), str(meta.cluster_id or self.brokers)

    def identity(self, stream: str) -> str:
        """The topic's id (KIP-516), as ``kafka-topics --describe`` prints it: a topic deleted and created again
        under its name gets another one."""
        doing = f"describing topic {stream!r}"
        future = self.clients.admin().describe_topics(
            TopicCollection([stream]), request_timeout=max(1.0, self.clients.timeout_s)
        )[stream]
        try:
            description = future.result(timeout=self.clients.timeout_s + 1.0)
        except KafkaException as error:
            refused = self.clients.refusal(doing)
            if refused is not None:
                raise refused from None
            code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
            if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise StreamError(f"Kafka topic {stream!r} is missing from the metadata of {self.brokers}") from None
            raise self.clients.error(doing, error) from None
        except TimeoutError:
            self.clients.forget_admin()
            raise StreamError(f"Kafka at {self.brokers} did not answer {doing} in time") from None
        # librdkafka prints the id in standard base64, Kafka's own tools in its URL-safe form
        return str(description.topic_id).replace("+", "-").replace("/", "_")

    def _expansions(self, stream: str, count: int, cluster: str) -> list[Any]:
        """The expansions of ``stream`` this platform observed, recording what ``count`` shows now."""
        if self.home is None:
            return []
        log = ExpansionLog(self.home.root, cluster, stream)
        ends = lambda: self.list_offsets(stream, count, _LATEST)  # noqa: E731 - only when a point is due
        return log.observe(count, ends, self.clients.settings.expansion_grace_ms)

    def describe(self, stream: str) -> StreamMetadata:
        count, cluster = self.metadata(stream)
        expansions = self._expansions(stream, count, cluster)
        earliest = self.list_offsets(stream, count, _EARLIEST)
        ends = self.list_offsets(stream, count, _LATEST)
        return StreamMetadata(
            system=SYSTEM,
            stream=stream,
            partitions={
                p: PartitionMetadata(partition=p, earliest=str(earliest[p]), end=str(ends[p])) for p in range(count)
            },
            expansions=[e for e in expansions if e.end_offsets],  # settled ones; pending ones hold everything
            details={"brokers": self.brokers, "cluster_id": cluster},
        )

    def end_positions(self, stream: str) -> dict[int, Position]:
        count = self.partition_count(stream)
        return {p: str(o) for p, o in self.list_offsets(stream, count, _LATEST).items()}

    def positions_at(self, stream: str, at_ms: int) -> dict[int, Position]:
        """``offsetsForTimes``, read-committed: each partition's first offset at or after ``at_ms``, or its end.

        The ends are asked first: a partition the broker then finds no record
        for had none at or after the time up to that end, so starting there
        skips nothing written since (the other order could skip records
        written between the two answers).
        """
        count = self.partition_count(stream)
        ends = self.list_offsets(stream, count, _LATEST)
        found = self.list_offsets(stream, count, OffsetSpec.for_timestamp(at_ms))
        return {p: str(ends[p] if o < 0 else o) for p, o in found.items()}

    def list_offsets(self, stream: str, count: int, spec: OffsetSpec) -> dict[int, int]:
        """Offsets of partitions 0..count-1; a partition whose answer is a retriable error is asked again.

        Right after an expansion the broker that leads a new partition may not
        know it yet and answers "Not leader for partition"; Kafka's own admin
        client asks again after a metadata refresh, librdkafka hands the answer
        back. So the partitions that got one of ``_RETRY_OFFSETS`` are asked
        again, with a growing pause, until the client's timeout; any other
        error, or the timeout, is the caller's error.
        """
        deadline = time.monotonic() + self.clients.timeout_s
        pause = 0.05
        found: dict[int, int] = {}
        missing = list(range(count))
        while True:
            request = {TopicPartition(stream, p): spec for p in missing}
            retry: list[int] = []
            try:
                futures = self.clients.admin().list_offsets(
                    request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self.clients.timeout_s
                )
                for tp, future in futures.items():
                    try:
                        found[tp.partition] = int(future.result().offset)
                    except KafkaException as error:
                        code = error.args[0].code() if error.args else None
                        if code not in _RETRY_OFFSETS or time.monotonic() >= deadline:
                            raise
                        retry.append(tp.partition)
            except KafkaException as error:
                raise self.clients.error(f"listing offsets of topic {stream!r}", error) from None
            if not retry:
                return found
            missing = retry
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 1.0)

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int:
        """The offset difference: an upper bound (gaps hold no records), and what Kafka's lag tools report."""
        return max(0, offset(end) - offset(start))

    def read_limits(self, stream: str, floors: Mapping[int, Position]) -> dict[int, Position | None]:
        """New partitions held back until their source is past the expansion point (``expansions``)."""
        if self.home is None:
            return {}
        count, cluster = self.metadata(stream)
        expansions = self._expansions(stream, count, cluster)
        log = ExpansionLog(self.home.root, cluster, stream)
        return dict.fromkeys(log.holds(expansions, floors, offset))

    def advance(self, stream: str, floors: Positions, records: Mapping[int, int], limits: Positions) -> dict[int, End]:
        """``min(floor + N, limit)``: at most N records, since gaps only remove records (docs/systems/kafka.md)."""
        return {p: str(min(offset(floors[p]) + max(n, 0), offset(limits[p]))) for p, n in records.items()}

    def create(self, stream: str, partitions: int, retention_ms: int | None = None) -> StreamMetadata:
        """A new topic; ``retention_ms`` its own ``retention.ms`` (-1: forever), else the broker's applies."""
        _not_internal(stream, "creating")
        count = check_partition_count(partitions)
        config = {} if retention_ms is None else {RETENTION_MS: str(valid_retention(retention_ms))}
        timeout_s = self.clients.timeout_s
        futures = self.clients.admin().create_topics(
            [NewTopic(stream, count, replication_factor=-1, config=config)],
            operation_timeout=timeout_s,
            request_timeout=timeout_s,
        )
        try:
            futures[stream].result()
        except KafkaException as error:
            code = error.args[0].code() if error.args else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                raise StreamError(f"Kafka topic {stream!r} already exists on {self.brokers}") from None
            raise self.clients.error(f"creating topic {stream!r}", error) from None
        return self._wait_for(stream, count)

    def retention(self, stream: str) -> int | None:
        """The topic's own ``retention.ms`` (``-1``: forever), ``None`` when it has none and the broker's applies."""
        resource = ConfigResource(ResourceType.TOPIC, stream)
        futures = self.clients.admin().describe_configs([resource], request_timeout=self.clients.timeout_s)
        try:
            entry = futures[resource].result().get(RETENTION_MS)
        except KafkaException as error:
            raise self.clients.error(f"describing the configs of topic {stream!r}", error) from None
        source = getattr(entry, "source", None)
        if entry is None or entry.value is None or getattr(source, "value", source) != _TOPIC_CONFIG:
            return None
        return int(entry.value)

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata:
        """Set the topic's ``retention.ms`` (``None``: delete it, back to the broker's), as ``kafka-configs.sh
        --alter --add-config`` or ``--delete-config`` does; the broker applies it at its next log clean-up."""
        _not_internal(stream, "setting the retention of")
        valid_retention(retention_ms)
        self.partition_count(stream)  # an unknown topic is named as the other commands name it
        entry = (
            ConfigEntry(RETENTION_MS, None, incremental_operation=AlterConfigOpType.DELETE)
            if retention_ms is None
            else ConfigEntry(RETENTION_MS, str(retention_ms), incremental_operation=AlterConfigOpType.SET)
        )
        resource = ConfigResource(ResourceType.TOPIC, stream, incremental_configs=[entry])
        futures = self.clients.admin().incremental_alter_configs([resource], request_timeout=self.clients.timeout_s)
        try:
            futures[resource].result()
        except KafkaException as error:
            raise self.clients.error(f"altering the retention.ms of topic {stream!r}", error) from None
        self._wait_for_retention(stream, retention_ms)
        return self.describe(stream)

    def _wait_for_retention(self, stream: str, retention_ms: int | None) -> None:
        """Until a broker shows the new setting, so ``stream alter`` prints, and ``retention`` reads, what holds."""
        wanted = "no retention.ms of its own" if retention_ms is None else f"retention.ms {retention_ms}"
        self._until_shown(stream, wanted, lambda: self.retention(stream), retention_ms)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        """Grow to a multiple of the current count with ``CreatePartitions``; the current count is a no-op."""
        _not_internal(stream, "adding partitions to")
        count = check_partition_count(partitions)
        current = self.partition_count(stream)
        if count == current:
            return self.describe(stream)
        check_growth(f"Kafka topic {stream!r}", current, count)  # Kafka itself cannot shrink a topic either
        timeout_s = self.clients.timeout_s
        futures = self.clients.admin().create_partitions(
            [NewPartitions(stream, count)], operation_timeout=timeout_s, request_timeout=timeout_s
        )
        try:
            futures[stream].result()
        except KafkaException as error:
            raise self.clients.error(f"adding partitions to topic {stream!r}", error) from None
        return self._wait_for(stream, count)

    def _wait_for(self, stream: str, count: int) -> StreamMetadata:
        self._until_shown(stream, f"{count} partitions", lambda: self.partition_count(stream), count)
        return self.describe(stream)

    def _until_shown(self, stream: str, wanted: str, read: Callable[[], object], value: object) -> None:
        """Poll ``read`` until it gives ``value``, within the system's ``timeout_ms``. The controller answers a
        change once it is committed to the metadata log; each broker applies it when it replays that log, so a
        read right after the answer can still see the old state (Kafka's own tests wait the same way). A
        ``StreamError`` while waiting (the topic not yet known to the broker asked) counts as not shown yet."""
        deadline = time.monotonic() + self.clients.timeout_s
        while True:
            try:
                shown = read()
            except StreamError:
                if time.monotonic() > deadline:
                    raise
            else:
                if shown == value:
                    return
                if time.monotonic() > deadline:
                    raise StreamError(
                        f"Kafka topic {stream!r}: the controller accepted {wanted}, but {self.brokers} still showed "
                        f"{shown} after {self.clients.settings.timeout_ms} ms. The change is committed and applies "
                        "when the brokers replay the metadata log: check that they are healthy, or raise the "
                        "system's timeout_ms"
                    )
            time.sleep(0.1)


def _not_internal(stream: str, what: str) -> None:
    if stream in INTERNAL_TOPICS:
        raise ConfigError(
            f"{stream!r} is one of the topics Kafka keeps for itself; {what} it is Kafka's to do "
            "(its broker settings, e.g. offsets.topic.num.partitions), not a stream's"
        )
