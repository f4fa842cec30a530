"""Kafka's producer side (tests, demos, benchmarks): idempotent appends, keys placed as Java's producer does.

Keyed records go where Java's default partitioner puts them (murmur2), so a
job's key buckets match other producers'; the result lists each record's
(partition, offset) in input order once every one is acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from pipelines.errors import StreamError
from pipelines.systems.base import Position, Record
from pipelines.systems.kafka.client import KafkaClients


class KafkaProducer:
    """Appends keyed records to one cluster's topics."""

    def __init__(self, clients: KafkaClients) -> None:
        self.clients = clients

    def produce(self, stream: str, records: Iterable[Record]) -> list[tuple[int, Position]]:
        """Append records, keyed ones where Java's producer puts them; returns (partition, offset) in input order."""
        clients = self.clients
        producer = clients.producer()
        placed: list[tuple[int, Position] | None] = []
        errors: list[str] = []

        def delivered(index: int) -> Any:
            def callback(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    errors.append(f"record {index}: {err.str()}")
                else:
                    placed[index] = (int(msg.partition()), str(msg.offset()))

            return callback

        for i, record in enumerate(records):
            try:
                key, value, headers = record
            except (TypeError, ValueError):
                raise StreamError(f"record {i} must be a (key, value, headers) tuple, got {record!r:.80}") from None
            if key is not None and not isinstance(key, bytes | bytearray | memoryview):
                raise StreamError(f"record {i}: key must be bytes or None, got {type(key).__name__}")
            if not isinstance(value, bytes | bytearray | memoryview):
                raise StreamError(f"record {i}: value must be bytes, got {type(value).__name__}")
            if headers is not None and not (
                isinstance(headers, Mapping)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
            ):
                raise StreamError(f"record {i}: headers must be a mapping of str to str or None")
            placed.append(None)
            kwargs: dict[str, Any] = {"value": bytes(value), "on_delivery": delivered(i)}
            if key is not None:
                kwargs["key"] = bytes(key)
            if headers:
                kwargs["headers"] = [(k, v.encode()) for k, v in headers.items()]
            while True:
                try:
                    producer.produce(stream, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: let deliveries drain it
                except KafkaException as error:
                    raise clients.error(f"producing to topic {stream!r}", error) from None
        wait_ms = max(clients.settings.timeout_ms, clients.settings.read_timeout_ms)
        remaining = producer.flush(wait_ms / 1000)
        if remaining:
            refused = clients.refusal(f"producing to topic {stream!r}")
            if refused is not None:
                raise refused
            raise StreamError(
                f"Kafka topic {stream!r} on {clients.brokers}: {remaining} records were not acknowledged within "
                f"{wait_ms} ms"
            )
        if errors:
            raise StreamError(f"Kafka topic {stream!r} on {clients.brokers}: {len(errors)} records failed: {errors[0]}")
        return [p for p in placed if p is not None]
