"""Records packed as the Kinesis Producer Library sends them, by awslabs' own aggregator (``aws-kinesis-agg``).

The KPL aggregates only the records it predicts for one shard (by the MD5 of
their partition key, against the shard map it knows), so a key's records stay
in one shard and in order. Every fourth record goes alone, as records do that
the KPL sends before their aggregate fills up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from aws_kinesis_agg.aggregator import RecordAggregator  # type: ignore[import-untyped]

from pipelines.systems.base import Record
from pipelines.systems.kinesis import KinesisSystem

AGGREGATE = 5
"""User records per aggregate at most: a read may pass its "at most N" by this less one."""


def kpl_pack(system: KinesisSystem, stream: str, records: Sequence[Record]) -> list[Record]:
    """``records`` (in order) as Kinesis records: aggregates per open shard, and some records alone."""
    ranges = [
        (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]), s["ShardId"])
        for s in system.client.list_shards(StreamName=stream, ShardFilter={"Type": "AT_LATEST"})["Shards"]
    ]

    def shard_of(key: str) -> str:
        h = int(hashlib.md5(key.encode()).hexdigest(), 16)
        return next(shard for low, high, shard in ranges if low <= h <= high)

    out: list[Record] = []
    pending: dict[str, RecordAggregator] = {}

    def flush(shard: str) -> None:
        pk, _ehk, blob = pending.pop(shard).clear_and_get().get_contents()
        out.append((pk.encode(), bytes(blob), None))

    for i, (raw_key, value, _headers) in enumerate(records):
        assert raw_key is not None
        key = bytes(raw_key).decode()
        shard = shard_of(key)
        if i % 4 == 3:  # alone: what is pending for its shard goes first, so each key keeps its order
            if shard in pending:
                flush(shard)
            out.append((raw_key, value, None))
            continue
        agg = pending.setdefault(shard, RecordAggregator())
        agg.add_user_record(key, bytes(value))
        if agg.get_num_user_records() == AGGREGATE:
            flush(shard)
    for shard in list(pending):
        flush(shard)
    return out
