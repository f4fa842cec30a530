"""Kinesis's producer side (tests, demos, benchmarks): PutRecords in order, without breaking a key's order.

Each record's partition is its shard's index among the open shards, the slot
a 1:1 model reads the shard in. Kinesis records have no headers: they are not
sent. A partial failure is retried for the failed records only when no later
record of the same key in the call succeeded.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.errors import StreamError
from pipelines.systems.base import Position, Record
from pipelines.systems.kinesis.admin import KinesisAdmin
from pipelines.systems.kinesis.client import KinesisClient
from pipelines.systems.kinesis.positions import RecordPosition

MAX_PUT_RECORDS = 500
MAX_PUT_BYTES = 5 * 1024 * 1024
MAX_RECORD_BYTES = 1024 * 1024


class KinesisProducer:
    """Appends keyed records to one region/endpoint's streams."""

    def __init__(self, client: KinesisClient, admin: KinesisAdmin) -> None:
        self.client = client
        self.admin = admin

    def produce(self, stream: str, records: Iterable[Record]) -> list[tuple[int, Position]]:
        """PutRecords in order; each record's partition is its shard's index among the open shards.

        That index is the slot a 1:1 model reads the shard in. Kinesis records
        have no headers: they are not sent. A partial failure is retried for
        the failed records only when no later record of the same key in the
        call succeeded (otherwise the key's order would break; that is an
        error).
        """
        items: list[tuple[str, bytes]] = []
        for i, record in enumerate(records):
            try:
                key, value, _headers = record
            except (TypeError, ValueError):
                raise StreamError(f"record {i} must be a (key, value, headers) tuple, got {record!r:.80}") from None
            if key is None:
                raise StreamError(f"record {i}: Kinesis needs a partition key for every record; got None")
            try:
                text = bytes(key).decode("utf-8")
            except (TypeError, UnicodeDecodeError):
                raise StreamError(f"record {i}: a Kinesis partition key is UTF-8 text; got {key!r:.80}") from None
            if not 1 <= len(text) <= 256:
                raise StreamError(f"record {i}: a Kinesis partition key has 1 to 256 characters, got {len(text)}")
            if not isinstance(value, bytes | bytearray | memoryview) or len(value) > MAX_RECORD_BYTES:
                raise StreamError(f"record {i}: the value must be bytes of at most 1 MiB")
            items.append((text, bytes(value)))
        placed: list[tuple[str, str] | None] = [None] * len(items)
        for chunk in _chunks(items):
            self._put(stream, items, chunk, placed)
        mapper, _ = self.admin.listing(stream, max_age_s=0)
        index = {s: i for i, s in enumerate(mapper.open_shards())}
        result = []
        for item in placed:
            if item is None:  # _put places every record of its chunk or raises
                raise AssertionError("a record was neither written nor refused")
            shard, sequence = item
            if shard not in index:  # resharded meanwhile
                mapper, _ = self.admin.listing(stream, max_age_s=0)
                index = {s: i for i, s in enumerate(mapper.open_shards())}
            result.append((index.get(shard, -1), RecordPosition(shard, sequence).encode()))
        return result

    def _put(
        self, stream: str, items: list[tuple[str, bytes]], chunk: list[int], placed: list[tuple[str, str] | None]
    ) -> None:
        pending = chunk
        for _ in self.client.backoff.attempts(self.client.settings.max_attempts):
            answer = self.client.call(
                stream,
                "put_records",
                StreamName=stream,
                Records=[{"Data": items[i][1], "PartitionKey": items[i][0]} for i in pending],
            )
            failed = []
            for i, outcome in zip(pending, answer["Records"], strict=True):
                if outcome.get("ErrorCode"):
                    failed.append(i)
                else:
                    placed[i] = (outcome["ShardId"], outcome["SequenceNumber"])
            if not failed:
                return
            failed_keys = {items[i][0] for i in failed}
            overtaken = [i for i in pending if placed[i] and items[i][0] in failed_keys and i > min(failed)]
            if overtaken:
                raise StreamError(
                    f"Kinesis stream {stream!r}: {len(failed)} records failed while later records of the same keys "
                    "were written; retrying would break those keys' order. Write fewer records per call"
                )
            pending = failed
        raise StreamError(f"Kinesis stream {stream!r}: {len(pending)} records still failed after retries")


def _chunks(items: list[tuple[str, bytes]]) -> Iterable[list[int]]:
    chunk: list[int] = []
    size = 0
    for i, (key, value) in enumerate(items):
        record = len(key.encode("utf-8")) + len(value)
        if chunk and (len(chunk) == MAX_PUT_RECORDS or size + record > MAX_PUT_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(i)
        size += record
    if chunk:
        yield chunk
