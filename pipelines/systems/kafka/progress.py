"""A job's progress mirrored to its Kafka consumer group, so Kafka's own lag tools see it.

The checkpoints in the platform's Delta tables are what reads start from;
the group's commits are a copy for operators (``commit_progress``), written
after each micro-batch and never read back by the job.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipelines.errors import StreamError
from pipelines.systems.base import Position
from pipelines.systems.kafka.admin import KafkaAdmin
from pipelines.systems.kafka.client import KafkaClients
from pipelines.systems.kafka.positions import offset


class KafkaProgress:
    """Commits a job's floors to its consumer group, and reads what a group committed."""

    def __init__(self, clients: KafkaClients, admin: KafkaAdmin) -> None:
        self.clients = clients
        self.admin = admin

    def acknowledge(self, job: str, stream: str, positions: Mapping[int, Position]) -> None:
        """Commit the job's floors to its consumer group, so Kafka's lag tools see its progress."""
        settings = self.clients.settings
        if not settings.commit_progress or not positions:
            return
        group = settings.consumer_group or job
        committer = self.clients.committer(group)
        offsets = [TopicPartition(stream, p, offset(pos)) for p, pos in sorted(positions.items())]
        try:
            result = committer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            raise self.clients.error(f"committing progress of group {group!r} on topic {stream!r}", error) from None
        failed = [tp for tp in result or [] if tp.error is not None]
        if failed:
            raise StreamError(
                f"Kafka group {group!r} on {self.clients.brokers}: commit of topic {stream!r} partitions "
                f"{[tp.partition for tp in failed]} failed: {failed[0].error}"
            )

    def committed(self, group: str, stream: str) -> dict[int, Position]:
        """What a consumer group has committed on a topic (what lag tools read); partitions without a commit omitted."""
        count = self.admin.partition_count(stream)
        reader = Consumer({**self.clients.conf(), "group.id": group, "enable.auto.commit": "false"})
        try:
            found = reader.committed([TopicPartition(stream, p) for p in range(count)], timeout=self.clients.timeout_s)
        except KafkaException as error:
            raise self.clients.error(f"reading committed offsets of group {group!r}", error) from None
        finally:
            reader.close()
        return {tp.partition: str(tp.offset) for tp in found if tp.offset >= 0}
