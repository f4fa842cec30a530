"""The executors' side of Kafka: one partition's records from a position, read-committed, ending in gaps.

A partition is read with ``assign`` and a seek, with no group membership:
the job model decides who reads what. A read of ``[start, end)`` stops at the
first record at or after ``end`` or when the end-of-partition event says the
fetch position is past it, so a range ending in a gap (markers, aborted
transactions, compaction) completes; the position after a read is what the
broker says is next. See docs/systems/kafka.md, "Reads".
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, Message, TopicPartition

from pipelines.errors import StreamError
from pipelines.systems.base import RECORD_SCHEMA, Bounded, End, Position, ReadResult
from pipelines.systems.kafka.client import KafkaClients
from pipelines.systems.kafka.positions import offset

_FETCH_BATCH = 10_000


class KafkaReader:
    """Reads partitions of one cluster's topics with this thread's consumer."""

    def __init__(self, clients: KafkaClients) -> None:
        self.clients = clients

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        """``[start, end)`` or at most ``end.records`` records; ends in gaps complete (docs/systems/kafka.md)."""
        clients = self.clients
        first = offset(start)
        if isinstance(end, Bounded):
            stop, budget = None, max(end.records, 0)
            if budget == 0:
                return ReadResult(RECORD_SCHEMA.empty_table(), str(first))
        else:
            stop, budget = offset(end), None
            if stop < first:
                raise StreamError(f"Kafka topic {stream!r} partition {partition}: end {stop} is before start {first}")
            if stop == first:
                return ReadResult(RECORD_SCHEMA.empty_table(), str(first))
        consumer = clients.consumer()
        consumer.assign([TopicPartition(stream, partition, first)])
        rows = _Rows(partition)
        position = first
        deadline = time.monotonic() + clients.settings.read_timeout_ms / 1000
        last_error: KafkaError | None = None
        try:
            done = False
            while not done:
                want = _FETCH_BATCH if budget is None else min(_FETCH_BATCH, budget - len(rows))
                # consume() waits until it has all it asked for: take what is queued, else wait for one.
                batch = consumer.consume(num_messages=want, timeout=0)
                if not batch:
                    one = consumer.poll(0.1)
                    batch = [] if one is None else [one]
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            # The broker's fetch position: everything below it has been delivered or was a gap.
                            eof = _at(msg)
                            if stop is None:
                                position, done = max(position, eof), True
                            elif eof >= stop:
                                position, done = stop, True
                            if done:
                                break
                            continue
                        if error.fatal() or error.code() in (
                            KafkaError._AUTO_OFFSET_RESET,
                            KafkaError.OFFSET_OUT_OF_RANGE,
                            KafkaError.UNKNOWN_TOPIC_OR_PART,
                            KafkaError.TOPIC_AUTHORIZATION_FAILED,
                        ):
                            raise clients.read_error(stream, partition, first, error)
                        last_error = error  # transient (a broker down): librdkafka retries, we wait
                        continue
                    at = _at(msg)
                    if stop is not None and at >= stop:
                        position, done = stop, True
                        break
                    rows.add(msg)
                    position = at + 1
                    if (stop is not None and position >= stop) or (budget is not None and len(rows) >= budget):
                        done = True
                        break
                if not done and clients.refused is not None:
                    doing = f"reading topic {stream!r} partition {partition}"
                    raise clients.refusal(doing) or StreamError(clients.refused)
                if not done and time.monotonic() > deadline:
                    target = f"offset {stop}" if stop is not None else "its end"
                    cause = f"; last error: {last_error.str()}" if last_error is not None else ""
                    raise StreamError(
                        f"Kafka topic {stream!r} partition {partition} on {clients.brokers}: reading from offset "
                        f"{first} did not reach {target} within {clients.settings.read_timeout_ms} ms (at "
                        f"{position}){cause}"
                    )
        finally:
            consumer.unassign()
        table = rows.table()
        return ReadResult(table, str(position), bytes_fetched=rows.bytes)


def _at(msg: Message) -> int:
    """The offset of a record or of an end-of-partition event (librdkafka sets it on both)."""
    at = msg.offset()
    assert at is not None
    return at


class _Rows:
    """Records of one read, gathered column by column (cheaper than a row list turned into a table)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.offsets: list[str] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes] = []
        self.timestamps: list[int] = []
        self.headers: list[str | None] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, msg: Any) -> None:
        key, value = msg.key(), msg.value()
        self.offsets.append(str(msg.offset()))
        self.keys.append(key)
        self.values.append(value if value is not None else b"")  # a tombstone's null value reads as empty
        self.timestamps.append(msg.timestamp()[1] * 1000)
        headers = msg.headers()
        self.headers.append(
            None
            if headers is None
            else json.dumps(
                {k: (v or b"").decode("utf-8", "replace") for k, v in headers},
                separators=(",", ":"),
                ensure_ascii=False,
            )
        )
        self.bytes += len(value or b"") + len(key or b"")

    def table(self) -> pa.Table:
        n = len(self.offsets)
        return pa.Table.from_arrays(
            [
                pa.repeat(pa.scalar(self.partition, pa.int32()), n),
                pa.array(self.offsets, pa.string()),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
                pa.array(self.headers, pa.string()),
            ],
            schema=RECORD_SCHEMA,
        )
