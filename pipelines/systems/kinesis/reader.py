"""The executors' side of Kinesis: a slot's records from its checkpoint, shard by shard, within the limits.

``read`` reads a slot's unfinished shards in shard order, each shard with
GetRecords in sequence order. An "at most N records" read splits N over the
shards; a read to a pinned slot position (a replayed micro-batch) returns
exactly the records the first read returned, or fails. Children are never
taken over here, only in the driver's plan (``admin.advance``). Shard
iterators are cached per process for a read that continues where the last
one stopped. Records trimmed before they were read stop the read, or are
counted and logged (``on_trimmed: skip``). A KPL aggregate becomes its user
records (``aggregation``), a read never stopping inside one. See
docs/systems/kinesis.md, "Reads", "KPL-aggregated records" and "Trimmed
records and outages".
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.backoff import Backoff
from pipelines.core.shards import SHARD_END, TRIM_HORIZON, SlotPlan, apply_plan
from pipelines.errors import StreamError
from pipelines.systems.base import RECORD_SCHEMA, Bounded, End, Position, ReadResult
from pipelines.systems.kinesis.admin import KinesisAdmin, check_created
from pipelines.systems.kinesis.aggregation import deaggregate
from pipelines.systems.kinesis.client import ExpiredIterator, KinesisClient, NotYet, Trimmed, Unreachable
from pipelines.systems.kinesis.positions import (
    SlotPosition,
    TimeTarget,
    decode,
    decode_slot,
    iterator_at,
    shard_ordinal,
    state_key,
    utc,
)

log = logging.getLogger(__name__)

ITERATOR_TTL_S = 240.0  # Kinesis iterators live 5 minutes; reuse a cached one only well within that
CREATED_TTL_S = 1.0
"""How long a stream's creation time serves this process's fresh iterators: slots starting at once share a call."""

_ITERATORS_LOCK = threading.Lock()
_ITERATORS: dict[tuple[Any, ...], tuple[str, float]] = {}
_PACKING: dict[tuple[Any, ...], float] = {}
"""User records per Kinesis record in the last page of a stream this process read (KPL aggregates: above 1).

An "at most N records" read counts user records, GetRecords' ``Limit`` counts Kinesis records: asked for N
Kinesis records of 50 user records each, a read stopped after the first N/50 of the page, could not keep the
page's next iterator, and paid a GetShardIterator call (at 5 calls/s per shard) in every micro-batch. The
read asks for about as many Kinesis records as its user records need instead."""


@dataclass
class _ShardRead:
    """What reading one shard gave: its records (as rows), its new state, and whether it stopped caught up."""

    rows: list[tuple[str, str, str, bytes, datetime]]
    state: str
    caught_up: bool = False
    advanced: int = 0
    """How far the slot's count ``n`` moves: a row per record, and one for an aggregate of no user records."""


class KinesisReader:
    """Reads slots of one region/endpoint's streams; the plan of each read comes from the driver."""

    def __init__(self, client: KinesisClient, admin: KinesisAdmin) -> None:
        self.client = client
        self.admin = admin
        self.settings = client.settings
        self.outage = Backoff(self.settings.backoff_base_s, self.settings.backoff_cap_s, "equal")
        """Between tries of a read whose endpoint stopped answering: waiting out an outage, so equal jitter."""

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        """A slot's records from ``start``: at most N (``Bounded``), to a pinned slot position, or to a time.

        Records come shard by shard (in shard order), each shard's in sequence
        order; the next position counts them, so a replay with the pinned end
        returns exactly the same records and the same position.

        An endpoint that stops answering mid-read (a network partition, an
        emulator frozen) is waited out for ``read_timeout_s``, the whole read
        tried again with jittered back-off: the planner waits out an outage
        between batches, and a batch already running must not fail the job for
        a blip the planner would have survived (the embedded log's and Kafka's
        reads wait the same way). A read returns nothing until it is complete,
        so trying it again from ``start`` reads the same records.
        """
        began = time.monotonic()
        deadline = began + self.settings.read_timeout_s
        for attempt in self.outage.attempts(deadline=deadline):
            try:
                result = self._read(stream, partition, start, end)
            except Unreachable as error:
                if time.monotonic() >= deadline:
                    raise StreamError(
                        f"{error}; a read waited {self.settings.read_timeout_s:g}s for it (check the endpoint and "
                        "the network, or raise systems.kinesis.read_timeout_s to wait out longer outages)"
                    ) from None
                continue
            if attempt == 0:
                return result
            # Held up by a silent endpoint for at most the read's whole time: the task reports it as an outage.
            return replace(result, stats={**result.stats, "outage_s": time.monotonic() - began})
        raise AssertionError("unreachable: attempts without a count never end")

    def _read(self, stream: str, partition: int, start: Position, end: End) -> ReadResult:
        here = decode_slot(start)
        stats: Counter[str] = Counter()
        if isinstance(end, Bounded):
            shards = apply_plan(here.shards, SlotPlan.from_json(end.plan))
            targets: dict[str, str | None] = dict.fromkeys(shards)
            budget: int | None = max(0, end.records)
            deadline = time.monotonic() + self.settings.read_wait_s
            pinned = None
        else:
            goal = decode(end)
            if isinstance(goal, SlotPosition):
                shards, targets = _replay_targets(stream, partition, here, goal)
                pinned = goal
                deadline = time.monotonic() + self.settings.replay_timeout_s
            elif isinstance(goal, TimeTarget):
                shards, targets, pinned = dict(here.shards), dict.fromkeys(here.shards), None
                deadline = time.monotonic() + self.settings.replay_timeout_s
            else:
                raise StreamError(f"a read ends at a slot position, a time or a Bounded end, got {end!r:.200}")
            budget = None
        transitions = len(set(shards) ^ set(here.shards))
        order = sorted((s for s, v in shards.items() if v != SHARD_END), key=shard_ordinal)
        rows: list[tuple[str, str, str, bytes, datetime]] = []
        states = dict(shards)
        ended = advanced = 0
        for i, shard in enumerate(order):
            quota = None if budget is None else (budget - advanced) // (len(order) - i)
            if quota == 0 and budget is not None:
                continue
            result = self._read_shard(
                stream, shard, states[shard], quota, targets.get(shard), deadline, stats, here.created, here.since
            )
            rows += result.rows
            advanced += result.advanced
            ended += result.state == SHARD_END
            states[shard] = result.state
        if pinned is not None:
            for shard, target in targets.items():
                if target is not None and states[shard] != target:
                    raise StreamError(
                        f"Kinesis stream {stream!r} slot {partition}: a replayed micro-batch could not reach shard "
                        f"{shard} at {target} (it stopped at {states[shard]}); the records it read first are gone"
                    )
            if here.n + transitions + advanced + ended != pinned.n:
                raise StreamError(
                    f"Kinesis stream {stream!r} slot {partition}: a replayed micro-batch read {len(rows)} records "
                    "where the first read counted a different number; refusing to return other records"
                )
            next_position = end if isinstance(end, str) else pinned.encode()
        else:
            next_position = SlotPosition(
                states, here.n + transitions + advanced + ended, here.created, here.since
            ).encode()
        stats["shards_read"] = len(order)
        table = _table(partition, rows)
        return ReadResult(table, next_position, bytes_fetched=int(stats.pop("bytes", 0)), stats=dict(stats))

    def _read_shard(
        self,
        stream: str,
        shard: str,
        state: str,
        quota: int | None,
        target: str | None,
        deadline: float,
        stats: Counter[str],
        created: int | None = None,
        since: int | None = None,
    ) -> _ShardRead:
        """Records of one shard after ``state``: at most ``quota``, or up to ``target``, or until caught up.

        ``created`` is the creation time of the stream the slot read (``SlotPosition.created``): a sequence
        number the stream does not know is a trimmed record only if the stream is still that one. ``since``: a
        shard at ``TRIM_HORIZON`` is read from the first record that arrived at or after it
        (``SlotPosition.since``).
        """
        rows: list[tuple[str, str, str, bytes, datetime]] = []
        advanced = 0
        if state in (SHARD_END, target):
            return _ShardRead(rows, state, True, advanced)
        try:
            iterator, verify = self._iterator(stream, shard, state, stats, created, since)
        except NotYet:  # the endpoint's clock is behind this host's: nothing can have arrived since then yet
            return _ShardRead(rows, state, True)
        limit_cap = self.settings.get_records_limit
        records_limiter = self.client.limiter(stream, shard, "records")
        packing_key = (*self.client.key(), stream)  # a producer's packing: the stream's other shards learn from one
        while True:
            packing = _PACKING.get(packing_key, 1.0)
            if quota is None:
                want = limit_cap
            else:
                want = min(limit_cap, max(1, math.ceil((quota - advanced) / packing)) + (1 if verify else 0))
            waited = records_limiter.acquire()
            stats["rate_limited_ms"] += int(waited * 1000)
            try:
                page = self.client.call(stream, "get_records", stats, ShardIterator=iterator, Limit=want)
            except ExpiredIterator:
                stats["iterator_renewals"] += 1
                iterator, verify = self._iterator(stream, shard, state, stats, created, since, fresh=True)
                continue
            except Trimmed:
                # kinesis-mock hands out an iterator at a sequence number it does not hold and refuses it here
                self._check_same_stream(stream, created)
                raise
            stats["get_records_calls"] += 1
            records = page.get("Records", [])
            behind = int(page.get("MillisBehindLatest", 0) or 0)
            stats["millis_behind_latest"] = max(stats["millis_behind_latest"], behind)
            size = sum(len(r["Data"]) + len(r["PartitionKey"]) for r in records)
            records_limiter.spend(size)
            stats["bytes"] += size
            if verify is not None and records:
                first = records[0]["SequenceNumber"]
                if first == verify:
                    records = records[1:]
                    verify = None
                else:
                    # The record we read last is gone, so anything between it and ``first`` was trimmed.
                    self._trimmed(stream, shard, verify, first, stats, created)
                    verify = None
            consumed = 0
            stop = False
            before = advanced
            for record in records:
                sequence = record["SequenceNumber"]
                if target is not None and target != SHARD_END and state_key(sequence) > state_key(target):
                    raise StreamError(
                        f"Kinesis stream {stream!r} shard {shard}: a replayed micro-batch passed its pinned end "
                        f"{target} without finding it (now at {sequence}); the record was trimmed or never existed"
                    )
                arrival = record["ApproximateArrivalTimestamp"]
                users = deaggregate(record["Data"])  # None unless it begins with the KPL magic: one slice compare
                if users is None:
                    rows.append((shard, sequence, record["PartitionKey"], record["Data"], arrival))
                    advanced += 1
                else:  # a KPL aggregate: its user records, each under its sub-sequence number, with its own key
                    rows += [(shard, f"{sequence}:{i}", u.partition_key, u.data, arrival) for i, u in enumerate(users)]
                    advanced += max(1, len(users))
                    stats["aggregated_records"] += 1
                state = sequence
                consumed += 1
                if sequence == target or (quota is not None and advanced >= quota):
                    stop = True
                    break
            if consumed:
                _PACKING[packing_key] = (advanced - before) / consumed
            following = page.get("NextShardIterator")
            whole_page = consumed == len(records)
            if following is None and whole_page:
                return _ShardRead(rows, SHARD_END, True, advanced)
            if whole_page and following is not None and verify is None:
                self._remember(stream, shard, state, following, created, since)
            if stop:
                return _ShardRead(rows, state, advanced=advanced)
            if not records and behind == 0:
                return _ShardRead(rows, state, True, advanced)  # caught up
            if records and len(records) + (0 if verify is None else 1) < want and behind == 0:
                return _ShardRead(rows, state, True, advanced)
            if time.monotonic() >= deadline:
                if target is not None:
                    return _ShardRead(rows, state, advanced=advanced)  # the caller reports the missed target
                return _ShardRead(rows, state, advanced=advanced)
            iterator = following

    def _iterator(
        self,
        stream: str,
        shard: str,
        state: str,
        stats: Counter[str],
        created: int | None,
        since: int | None = None,
        *,
        fresh: bool = False,
    ) -> tuple[str, str | None]:
        """An iterator at ``state``, and the sequence number its first record must be (None: nothing to check)."""
        key = _cache_key(self.client.key(), stream, created, shard, state, since)
        if not fresh:
            with _ITERATORS_LOCK:
                cached = _ITERATORS.pop(key, None)
            if cached is not None and time.monotonic() - cached[1] < ITERATOR_TTL_S:
                stats["iterators_reused"] += 1
                return cached[0], None
        self.client.limiter(stream, shard, "iterator").acquire()
        if state == TRIM_HORIZON:
            kwargs = iterator_at(state, since)
        else:
            kwargs = {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": state}
        try:
            answer = self.client.call(stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, **kwargs)
        except Trimmed:
            self._trimmed(stream, shard, state, None, stats, created)
            answer = self.client.call(
                stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
            )
            return answer["ShardIterator"], None
        if state != TRIM_HORIZON:
            # kinesis-mock numbers a stream made again within the second as it numbered the old one, so the
            # check of the first record would pass on another record: the stream itself must be the slot's
            self._check_same_stream(stream, created, CREATED_TTL_S)
        return answer["ShardIterator"], (None if state == TRIM_HORIZON else state)

    def _remember(
        self, stream: str, shard: str, state: str, iterator: str, created: int | None, since: int | None
    ) -> None:
        key = _cache_key(self.client.key(), stream, created, shard, state, since)
        with _ITERATORS_LOCK:
            if len(_ITERATORS) > 10_000:
                for old in sorted(_ITERATORS, key=lambda k: _ITERATORS[k][1])[:5_000]:
                    del _ITERATORS[old]
            _ITERATORS[key] = (iterator, time.monotonic())

    def _trimmed(
        self, stream: str, shard: str, after: str, first: str | None, stats: Counter[str], created: int | None
    ) -> None:
        """Records after ``after`` were trimmed before they were read: fail loudly, or count and log (``skip``).

        Unless the stream is not the one the slot read: kinesis-mock answers a sequence number of a deleted
        stream of the name as it answers a trimmed one, and ``skip`` would read the new stream from its start.
        """
        self._check_same_stream(stream, created)
        if first is None:
            first = self._first_available(stream, shard)
        _, info = self.admin.listing(stream)
        upto = f"sequence number {first} (the oldest record still there)" if first else "the shard's end"
        message = (
            f"Kinesis stream {stream!r} shard {shard}: the records after sequence number {after} up to {upto} "
            f"were trimmed by the stream's retention period ({info.get('retention_hours')} h) before this job read "
            "them"
        )
        if self.settings.on_trimmed == "fail":
            raise StreamError(
                message + ". Nothing was skipped: the job stops here. To accept the loss and read on from the oldest "
                "record, set systems.kinesis.on_trimmed: skip (the loss is then counted as 'trimmed' in the metrics "
                "and logged); to prevent it, raise the stream's retention period or the job's throughput"
            )
        log.error("%s; on_trimmed: skip, reading on from the oldest record", message)
        stats["trimmed"] += 1

    def _check_same_stream(self, stream: str, created: int | None, max_age_s: float = 0.0) -> None:
        """``InputRewoundError`` if the stream was created again since the slot read it (its creation time)."""
        if created is not None:
            check_created(stream, [SlotPosition(created=created)], self.admin.created(stream, max_age_s))

    def _first_available(self, stream: str, shard: str) -> str | None:
        """The sequence number of a shard's oldest record still there (None: none left)."""
        stats: Counter[str] = Counter()
        answer = self.client.call(
            stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )
        iterator = answer["ShardIterator"]
        for _ in range(20):
            self.client.limiter(stream, shard, "records").acquire()
            page = self.client.call(stream, "get_records", stats, ShardIterator=iterator, Limit=1)
            if page.get("Records"):
                return str(page["Records"][0]["SequenceNumber"])
            iterator = page.get("NextShardIterator")
            if iterator is None or not page.get("MillisBehindLatest"):
                return None
        return None


def _replay_targets(
    stream: str, partition: int, here: SlotPosition, goal: SlotPosition
) -> tuple[dict[str, str], dict[str, str | None]]:
    """The shards a replay reads (the pinned end's, plus finished ones it dropped) and each one's pinned state."""
    for shard, state in here.shards.items():
        if shard not in goal.shards and state != SHARD_END:
            raise StreamError(
                f"Kinesis stream {stream!r} slot {partition}: the pinned end drops shard {shard}, which the start "
                f"has not read to its end ({state}); these positions are not from one read"
            )
        if shard in goal.shards and state_key(goal.shards[shard]) < state_key(state):
            raise StreamError(
                f"Kinesis stream {stream!r} slot {partition}: the pinned end is before the start in shard {shard}"
            )
    shards = {s: here.shards.get(s, TRIM_HORIZON) for s in goal.shards}
    return shards, dict(goal.shards)


def _cache_key(
    client: tuple[Any, ...], stream: str, created: int | None, shard: str, state: str, since: int | None
) -> tuple[Any, ...]:
    """An iterator serves the stream it was issued in, and one at ``TRIM_HORIZON`` only slots of the same start."""
    return (*client, stream, created, shard, state, since if state == TRIM_HORIZON else None)


def _table(partition: int, rows: list[tuple[str, str, str, bytes, datetime]]) -> pa.Table:
    n = len(rows)
    return pa.Table.from_arrays(
        [
            pa.array([partition] * n, pa.int32()),
            pa.array([f"{r[0]}:{r[1]}" for r in rows], pa.string()),
            pa.array([r[2].encode("utf-8") for r in rows], pa.binary()),
            pa.array([r[3] for r in rows], pa.binary()),
            pa.array([utc(r[4]) for r in rows], pa.timestamp("us", tz="UTC")),
            pa.nulls(n, pa.string()),
        ],
        schema=RECORD_SCHEMA,
    )
