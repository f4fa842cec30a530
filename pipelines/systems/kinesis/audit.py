"""What a job's readers read between two checkpoints, listed shard by shard for the data-quality checks.

The checks of an offset system read ``[start, end)`` of each partition; a
Kinesis slot's two checkpoints do not bound a range of one shard, so this is
``SupportsRecordsRead``: every listed shard is scanned from its oldest record
up to what the checkpoints say was read, and each record is attributed to the
slot that read it. Verification only, never on a micro-batch's path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from pipelines.core.shards import SHARD_END, TRIM_HORIZON, ShardPartitionMapper
from pipelines.systems.base import Position
from pipelines.systems.kinesis.admin import KinesisAdmin, ancestors
from pipelines.systems.kinesis.aggregation import deaggregate
from pipelines.systems.kinesis.client import KinesisClient
from pipelines.systems.kinesis.positions import (
    RecordPosition,
    arrival_ms,
    decode_slot,
    shard_ordinal,
    state_key,
    unread_in_shard,
)


class KinesisAudit:
    """Lists the records slots read, for ``pipelines.quality`` (``SupportsRecordsRead``)."""

    def __init__(self, client: KinesisClient, admin: KinesisAdmin) -> None:
        self.client = client
        self.admin = admin

    def records_read(
        self, stream: str, starts: Mapping[int, Position], ends: Mapping[int, Position]
    ) -> list[tuple[int | None, Position]]:
        """``records_read_keyed`` without the keys."""
        return [(slot, position) for slot, position, _ in self.records_read_keyed(stream, starts, ends)]

    def records_read_keyed(
        self, stream: str, starts: Mapping[int, Position], ends: Mapping[int, Position]
    ) -> list[tuple[int | None, Position, bytes]]:
        """Every record the slots read after ``starts`` (missing: from the job's start) up to ``ends``, with its slot.

        What the data-quality checks expect in the sink. A slot's positions
        are not a range of one shard, so the records are found shard by shard
        (every listed shard read from its oldest record up to what ``ends``
        say was read). The slot is None when the checkpoints no longer say
        it: a finished shard dropped from its slot once its children were
        taken over by several slots. A job that started at a time
        (``SlotPosition.since``) never read what arrived before it.
        """
        mapper, _ = self.admin.listing(stream, max_age_s=0)
        end_decoded = {p: decode_slot(pos) for p, pos in ends.items()}
        start_decoded = {p: decode_slot(pos) for p, pos in starts.items()}
        times = [s.since for s in (*end_decoded.values(), *start_decoded.values()) if s.since is not None]
        since = max(times, default=None)  # one per job
        end_slots = {p: s.shards for p, s in end_decoded.items()}
        start_slots = {p: s.shards for p, s in start_decoded.items()}
        result: list[tuple[int | None, Position, bytes]] = []
        for shard in sorted(mapper.shards, key=shard_ordinal):
            slot, upto = _holder(mapper, end_slots, shard)
            if upto is None or upto == TRIM_HORIZON:
                continue
            _, before = _holder(mapper, start_slots, shard)
            for sequence, sub, arrived, key in self._scan(stream, shard, upto):
                if since is not None and arrived < since:
                    continue
                if before is None or unread_in_shard(sequence, before):
                    result.append((slot, RecordPosition(shard, sequence, sub).encode(), key))
        return result

    def _scan(self, stream: str, shard: str, upto: str) -> list[tuple[str, int | None, int, bytes]]:
        """Records of ``shard`` from its oldest up to ``upto`` (a sequence number, or SHARD_END), as the reader
        lists them (a KPL aggregate's user records each under their sub-sequence number), with arrival times and
        partition keys (as the reader hands them to the job: UTF-8 bytes)."""
        stats: Counter[str] = Counter()
        limiter = self.client.limiter(stream, shard, "records")
        self.client.limiter(stream, shard, "iterator").acquire()
        answer = self.client.call(
            stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )
        iterator: str | None = answer["ShardIterator"]
        found: list[tuple[str, int | None, int, bytes]] = []
        while iterator is not None:
            limiter.acquire()
            limit = self.client.settings.get_records_limit
            page = self.client.call(stream, "get_records", stats, ShardIterator=iterator, Limit=limit)
            for record in page.get("Records", []):
                sequence = record["SequenceNumber"]
                if upto != SHARD_END and state_key(sequence) > state_key(upto):
                    return found
                users = deaggregate(record["Data"])
                arrived = arrival_ms(record)
                if users is None:
                    found.append((sequence, None, arrived, str(record["PartitionKey"]).encode()))
                else:
                    found += [(sequence, i, arrived, u.partition_key.encode()) for i, u in enumerate(users)]
            iterator = page.get("NextShardIterator")
            if not page.get("Records") and not page.get("MillisBehindLatest"):
                break
        return found


def _holder(
    mapper: ShardPartitionMapper, slots: Mapping[int, Mapping[str, str]], shard: str
) -> tuple[int | None, str | None]:
    """The slot that reads or read ``shard`` and how far, per these checkpoints (None, None: not read at all).

    A shard in no slot but an ancestor of one that is was read to its end
    (a child is taken over only then); its slot is known only if a single
    slot holds its descendants.
    """
    for slot, shards in slots.items():
        if shard in shards:
            return slot, shards[shard]
    holders = set()
    for slot, shards in slots.items():
        for other in shards:
            if shard in ancestors(mapper, [other]):
                holders.add(slot)
    if not holders:
        return None, None
    return (holders.pop() if len(holders) == 1 else None), SHARD_END
