"""Amazon Kinesis Data Streams as an ``InputSystem``, with boto3.

A job model's partitions of a Kinesis stream are slots; which shards a slot
reads is decided from the slots' checkpoints alone by
``pipelines.core.shards`` (parent before child, free slots first, then 1:n
sharing), so no lease table is needed and checkpoints stay in Delta. This
module lists shards, plans and reads slots within Kinesis's per-shard limits,
lays slots out again after a reshard (``relayout``), and fails loudly on
records trimmed before they were read. See docs/systems/kinesis.md.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipelines.core.shards import SHARD_END, TRIM_HORIZON, ShardInfo, ShardPartitionMapper, SlotPlan, apply_plan
from pipelines.errors import StreamError
from pipelines.systems.base import (
    RECORD_SCHEMA,
    Bounded,
    End,
    PartitionMetadata,
    Position,
    ReadResult,
    Record,
    StreamMetadata,
)
from pipelines.systems.kinesis_positions import (
    SYSTEM,
    RecordPosition,
    SlotPosition,
    TimeTarget,
    decode,
    decode_record,
    decode_slot,
    position_key,
    shard_ordinal,
    state_key,
    unread_in_shard,
)
from pipelines.systems.kinesis_settings import KinesisSettings, session, validate_settings

__all__ = ["KinesisSystem", "position_key", "validate_settings"]

log = logging.getLogger(__name__)

THROTTLES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "ThrottlingException",
        "KMSThrottlingException",
    }
)
ITERATOR_TTL_S = 240.0  # Kinesis iterators live 5 minutes; reuse a cached one only well within that
MAX_PUT_RECORDS = 500
MAX_PUT_BYTES = 5 * 1024 * 1024
MAX_RECORD_BYTES = 1024 * 1024

_LOCK = threading.Lock()
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_LIMITERS: dict[tuple[Any, ...], ShardLimiter] = {}
_ITERATORS: dict[tuple[Any, ...], tuple[str, float]] = {}


class ShardLimiter:
    """Calls and bytes per second for one shard, shared by a process's threads: a call waits for its turn.

    Calls are spaced ``1/calls_per_s`` apart (so never more than the limit in
    any second); bytes read are a debt repaid at ``bytes_per_s``, and the
    next call waits until it is, so a 10 MB answer pauses the shard for 5 s as
    Kinesis itself would.
    """

    def __init__(
        self,
        calls_per_s: float,
        bytes_per_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.interval = 1.0 / calls_per_s
        self.bytes_per_s = bytes_per_s
        self.clock = clock
        self.sleep = sleep
        self.next_call = 0.0
        self.debt = 0.0  # bytes not yet repaid at ``debt_at``
        self.debt_at = 0.0
        self.lock = threading.Lock()

    def acquire(self) -> float:
        """Wait for this call's turn; returns the seconds waited."""
        with self.lock:
            now = self.clock()
            repaid = self.debt_at + self.debt / self.bytes_per_s if self.debt > 0 else now
            at = max(now, self.next_call, repaid)
            self.next_call = at + self.interval
        wait = at - now
        if wait > 0:
            self.sleep(wait)
        return wait

    def spend(self, nbytes: int) -> None:
        with self.lock:
            now = self.clock()
            self.debt = max(0.0, self.debt - (now - self.debt_at) * self.bytes_per_s) + nbytes
            self.debt_at = now


@dataclass
class _ShardRead:
    """What reading one shard gave: its records (as rows), its new state, and whether it stopped caught up."""

    rows: list[tuple[str, str, str, bytes, datetime]]
    state: str
    caught_up: bool = False


class KinesisSystem:
    """Admin, consumer and producer of Kinesis streams in one region/endpoint (docs/systems/kinesis.md)."""

    system: str = SYSTEM

    def __init__(self, settings: Mapping[str, Any] | KinesisSettings | None = None, home: Any = None) -> None:
        self.settings = validate_settings(settings, "systems.kinesis")
        self.home = home
        self._listings: dict[str, tuple[float, ShardPartitionMapper, dict[str, Any]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "home": self.home}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["home"])  # type: ignore[misc]

    def __repr__(self) -> str:
        where = self.settings.endpoint_url or self.settings.region or "default region"
        return f"KinesisSystem({where})"

    # ---------------------------------------------------------------- clients

    @property
    def client(self) -> Any:
        """This process's boto3 Kinesis client for these settings (clients are thread-safe; sessions are not)."""
        key = (os.getpid(), *self.settings.client_key())
        with _LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                from botocore.config import Config

                s = self.settings
                config = Config(
                    retries={"total_max_attempts": 1},  # retried here, so throttling is counted and backed off
                    connect_timeout=s.connect_timeout_s,
                    read_timeout=s.request_timeout_s,
                    max_pool_connections=32,
                )
                client = session(s).client("kinesis", endpoint_url=s.endpoint_url, verify=s.verify_tls, config=config)
                _CLIENTS[key] = client
        return client

    def _limiter(self, stream: str, shard: str, kind: str) -> ShardLimiter:
        key = (os.getpid(), *self.settings.client_key(), stream, shard, kind)
        with _LOCK:
            limiter = _LIMITERS.get(key)
            if limiter is None:
                limiter = _LIMITERS[key] = ShardLimiter(
                    self.settings.get_records_per_second, self.settings.read_bytes_per_second
                )
        return limiter

    def _call(self, stream: str, operation: str, stats: Counter[str] | None = None, **kwargs: Any) -> Any:
        """One API call, retried with full-jitter back-off on throttling and on transient network errors."""
        from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

        s = self.settings
        for attempt in range(1, s.max_attempts + 1):
            try:
                return getattr(self.client, operation)(**kwargs)
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in THROTTLES:
                    if stats is not None:
                        stats["throttled"] += 1
                    if attempt == s.max_attempts:
                        raise StreamError(
                            f"Kinesis stream {stream!r}: {operation} was throttled {attempt} times in a row ({code}); "
                            "the stream's shards are read or written faster than Kinesis allows: lower the job's "
                            "parallel readers or raise max_attempts / backoff_cap_s"
                        ) from None
                elif status >= 500 and attempt < s.max_attempts:
                    pass  # a transient server error: retry
                else:
                    raise _stream_error(stream, error, self.settings) from None
            except (ConnectionError, HTTPClientError) as error:
                if attempt == s.max_attempts:
                    raise _Unreachable(
                        f"cannot reach Kinesis at {s.endpoint_url or s.region or 'the default endpoint'}: {error}"
                    ) from None
            time.sleep(random.uniform(0, min(s.backoff_cap_s, s.backoff_base_s * 2**attempt)))
        raise AssertionError("unreachable")

    # ---------------------------------------------------------------- listing

    def _listing(self, stream: str, max_age_s: float = 0.5) -> tuple[ShardPartitionMapper, dict[str, Any]]:
        """The stream's shards (ListShards) and summary; cached briefly so one micro-batch plans on one listing."""
        cached = self._listings.get(stream)
        now = time.monotonic()
        if cached is not None and now - cached[0] <= max_age_s:
            return cached[1], cached[2]
        summary = self._call(stream, "describe_stream_summary", StreamName=stream)["StreamDescriptionSummary"]
        status = summary.get("StreamStatus")
        if status not in ("ACTIVE", "UPDATING"):
            raise StreamError(
                f"Kinesis stream {stream!r} is {status}, not ACTIVE"
                + ("; it is being deleted" if status == "DELETING" else "; wait until it is created")
            )
        shards: list[ShardInfo] = []
        kwargs: dict[str, Any] = {"StreamName": stream}
        while True:
            page = self._call(stream, "list_shards", **kwargs)
            for raw in page.get("Shards", []):
                parents = tuple(p for p in (raw.get("ParentShardId"), raw.get("AdjacentParentShardId")) if p)
                shards.append(
                    ShardInfo(
                        hash_start=int(raw["HashKeyRange"]["StartingHashKey"]),
                        shard_id=raw["ShardId"],
                        parents=parents,
                        # presence only: kinesis-mock's EndingSequenceNumber value is wrong (docs/systems/kinesis.md)
                        open="EndingSequenceNumber" not in raw.get("SequenceNumberRange", {}),
                    )
                )
            token = page.get("NextToken")
            if not token:
                break
            kwargs = {"NextToken": token}
        check_lineage_order(stream, shards)
        mapper = ShardPartitionMapper(shards)
        info = {
            "arn": summary.get("StreamARN"),
            "status": status,
            "retention_hours": summary.get("RetentionPeriodHours"),
            "mode": (summary.get("StreamModeDetails") or {}).get("StreamMode"),
        }
        self._listings[stream] = (now, mapper, info)
        return mapper, info

    # ---------------------------------------------------------------- admin

    def describe(self, stream: str) -> StreamMetadata:
        """The layout a new job starts with: one slot per open shard, the oldest listed shards in them."""
        mapper, info = self._listing(stream, max_age_s=0)
        count = max(1, len(mapper.open_shards()))
        layout = mapper.initial_layout(count)
        end = TimeTarget(_now_ms()).encode()
        status = mapper.status(layout)
        partitions = {
            slot: PartitionMetadata(
                partition=slot,
                earliest=SlotPosition(shards).encode(),
                end=end,
                details={"shards": {s: status[s] for s in sorted(shards, key=shard_ordinal)}},
            )
            for slot, shards in layout.items()
        }
        return StreamMetadata(
            system=SYSTEM,
            stream=stream,
            partitions=partitions,
            details={**info, "open_shards": mapper.open_shards(), "shards": status},
        )

    def lineage(self, stream: str, positions: Mapping[int, Position]) -> dict[str, dict[str, Any]]:
        """Every listed shard with parents, children, open/closed and the slot reading it, from a job's checkpoints."""
        mapper, _ = self._listing(stream, max_age_s=0)
        return mapper.status({p: decode_slot(pos).shards for p, pos in positions.items()})

    def end_positions(self, stream: str) -> dict[int, Position]:
        """A time per slot: "everything that arrived before now" (no end sequence number exists for open shards)."""
        mapper, _ = self._listing(stream)
        target = TimeTarget(_now_ms()).encode()
        return dict.fromkeys(range(max(1, len(mapper.open_shards()))), target)

    def position_key(self, position: Position) -> Any:
        return position_key(position)

    def reached(self, stream: str, partition: int, position: Position, target: Position) -> bool:
        """Whether nothing in this slot that arrived before ``target`` is unread.

        Asked of Kinesis itself (one GetRecords of one record after each of
        the slot's shards' positions), so it becomes true for an idle slot as
        soon as its reader is caught up. A slot still holding a finished shard
        whose children are not taken over yet has not reached anything: those
        children may hold older records.
        """
        goal = decode(target)
        here = decode_slot(position)
        if isinstance(goal, SlotPosition):
            return here.n >= goal.n and all(
                state_key(here.shards.get(s, SHARD_END)) >= state_key(v) for s, v in goal.shards.items()
            )
        if not isinstance(goal, TimeTarget):
            raise StreamError(f"a reach target is a time or a slot position, got {target!r:.200}")
        if any(state == SHARD_END for state in here.shards.values()):
            return False
        stats: Counter[str] = Counter()
        for shard in here.unfinished():
            state = here.shards[shard]
            if state == TRIM_HORIZON:
                kwargs: dict[str, Any] = {"ShardIteratorType": "TRIM_HORIZON"}
            else:
                kwargs = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": state}
            self._limiter(stream, shard, "iterator").acquire()
            try:
                iterator = self._call(stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, **kwargs)
            except _Trimmed:
                return False  # the read will report it
            self._limiter(stream, shard, "records").acquire()
            page = self._call(stream, "get_records", stats, ShardIterator=iterator["ShardIterator"], Limit=1)
            records = page.get("Records", [])
            if records:
                if _arrival_ms(records[0]) < goal.arrived_before_ms:
                    return False
            elif page.get("NextShardIterator") is None or page.get("MillisBehindLatest", 0) > 0:
                return False  # at its end (children to take over) or behind with an empty page
        return True

    def unread(self, stream: str, partition: int, records: Sequence[Position], position: Position) -> list[bool]:
        """Per record: unread if its shard is in the slot and not read past it, or its shard is still to be taken.

        A record of a shard that is not in the slot but is an ancestor of one
        that is has been read (a child is only taken over after its parents).
        """
        slot = decode_slot(position)
        ancestors: set[str] | None = None
        result = []
        for raw in records:
            record = decode_record(raw)
            state = slot.shards.get(record.shard)
            if state is not None:
                result.append(unread_in_shard(record.sequence, state))
                continue
            if ancestors is None:
                ancestors = self._ancestors(stream, slot.shards)
            result.append(record.shard not in ancestors)
        return result

    def _ancestors(self, stream: str, shards: Iterable[str]) -> set[str]:
        mapper, _ = self._listing(stream)
        seen: set[str] = set()
        stack = list(shards)
        while stack:
            info = mapper.shards.get(stack.pop())
            for parent in info.parents if info else ():
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return seen

    def records_read(
        self, stream: str, starts: Mapping[int, Position], ends: Mapping[int, Position]
    ) -> list[tuple[int | None, Position]]:
        """Every record the slots read after ``starts`` (missing: from the job's start) up to ``ends``, with its slot.

        What the data-quality checks expect in the sink. A slot's positions
        are not a range of one shard, so the records are found shard by shard
        (every listed shard read from its oldest record up to what ``ends``
        say was read). The slot is None when the checkpoints no longer say
        it: a finished shard dropped from its slot once its children were
        taken over by several slots.
        """
        mapper, _ = self._listing(stream, max_age_s=0)
        end_slots = {p: decode_slot(pos).shards for p, pos in ends.items()}
        start_slots = {p: decode_slot(pos).shards for p, pos in starts.items()}
        result: list[tuple[int | None, Position]] = []
        for shard in sorted(mapper.shards, key=shard_ordinal):
            slot, upto = _holder(mapper, end_slots, shard)
            if upto is None or upto == TRIM_HORIZON:
                continue
            _, before = _holder(mapper, start_slots, shard)
            for sequence in self._scan(stream, shard, upto):
                if before is None or unread_in_shard(sequence, before):
                    result.append((slot, RecordPosition(shard, sequence).encode()))
        return result

    def _scan(self, stream: str, shard: str, upto: str) -> list[str]:
        """Sequence numbers of ``shard`` from its oldest record up to ``upto`` (a sequence number, or SHARD_END)."""
        stats: Counter[str] = Counter()
        limiter = self._limiter(stream, shard, "records")
        self._limiter(stream, shard, "iterator").acquire()
        answer = self._call(
            stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )
        iterator: str | None = answer["ShardIterator"]
        found: list[str] = []
        while iterator is not None:
            limiter.acquire()
            limit = self.settings.get_records_limit
            page = self._call(stream, "get_records", stats, ShardIterator=iterator, Limit=limit)
            for record in page.get("Records", []):
                sequence = record["SequenceNumber"]
                if upto != SHARD_END and state_key(sequence) > state_key(upto):
                    return found
                found.append(sequence)
            iterator = page.get("NextShardIterator")
            if not page.get("Records") and not page.get("MillisBehindLatest"):
                break
        return found

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int | None:
        """Kinesis cannot count records without reading them: lag is time (``millis_behind_latest``)."""
        return None

    def read_limits(self, stream: str, floors: Mapping[int, Position]) -> dict[int, Position | None]:
        """Nothing is held back by position: children are simply not in any slot until their parents are done."""
        return {}

    def advance(
        self,
        stream: str,
        floors: Mapping[int, Position],
        records: Mapping[int, int],
        limits: Mapping[int, Position],
    ) -> dict[int, End]:
        """At most N records per slot, each slot's plan decided here with every slot's floor in view.

        ``floors`` must hold every slot of the stream in the job: a shard in a
        slot the mapper is not shown looks unread.
        """
        mapper, _ = self._listing(stream)
        slots = {p: decode_slot(pos).shards for p, pos in floors.items()}
        plans = mapper.plan(slots)
        return {p: Bounded(floors[p], max(0, n), plans[p].to_json()) for p, n in records.items()}

    def relayout(self, stream: str, positions: Mapping[int, Position], partitions: int) -> dict[int, Position]:
        """Where each of ``partitions`` new slots starts, given every old slot's checkpoint.

        The new job model (the 1:1 model after a reshard: ``partitions`` =
        open shards, ``describe(stream).partition_count``) starts from these:
        every shard keeps its state, so nothing is read twice or skipped, and
        children still wait for their parents (``ShardPartitionMapper.relayout``).
        """
        mapper, _ = self._listing(stream, max_age_s=0)
        old = {p: decode_slot(pos) for p, pos in positions.items()}
        layout = mapper.relayout({p: s.shards for p, s in old.items()}, partitions)
        n = max((s.n for s in old.values()), default=0) + 1
        return {p: SlotPosition(shards, n).encode() for p, shards in layout.items()}

    def create(self, stream: str, partitions: int) -> StreamMetadata:
        """Create a provisioned stream of ``partitions`` shards and wait until it is active (tests, demos)."""
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise StreamError(f"a Kinesis stream needs a shard count >= 1, got {partitions!r}")
        try:
            self._call(stream, "create_stream", StreamName=stream, ShardCount=partitions)
        except StreamError as error:
            if "ResourceInUseException" in str(error):
                raise StreamError(f"Kinesis stream {stream!r} already exists") from None
            raise
        self._wait_active(stream)
        return self.describe(stream)

    def delete(self, stream: str) -> None:
        """Delete a stream (tests, demos); Kinesis finishes deleting it in the background."""
        self._call(stream, "delete_stream", StreamName=stream, EnforceConsumerDeletion=True)
        self._listings.pop(stream, None)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        raise StreamError(
            f"Kinesis stream {stream!r} is not expanded by a partition count: reshard it (split_shard / "
            "merge_shards here, or UpdateShardCount, SplitShard, MergeShards in AWS); the repartition watch then "
            "switches the job to one slot per open shard"
        )

    def split_shard(self, stream: str, shard: str, new_starting_hash_key: int | None = None) -> list[str]:
        """Split ``shard`` (at the middle of its hash range by default); returns the two children's ids."""
        mapper, _ = self._listing(stream, max_age_s=0)
        info = mapper.shards.get(shard)
        if info is None or not info.open:
            raise StreamError(f"Kinesis stream {stream!r} has no open shard {shard!r}; open: {mapper.open_shards()}")
        page = self._call(stream, "list_shards", StreamName=stream, ShardFilter={"Type": "AT_LATEST"})
        ranges = {s["ShardId"]: s["HashKeyRange"] for s in page.get("Shards", [])}
        lo, hi = int(ranges[shard]["StartingHashKey"]), int(ranges[shard]["EndingHashKey"])
        at = (lo + hi + 1) // 2 if new_starting_hash_key is None else new_starting_hash_key
        if not lo < at <= hi:
            raise StreamError(f"shard {shard!r} covers hash keys {lo}..{hi}; cannot split it at {at}")
        self._call(stream, "split_shard", StreamName=stream, ShardToSplit=shard, NewStartingHashKey=str(at))
        return self._wait_children(stream, shard)

    def merge_shards(self, stream: str, shard: str, adjacent: str) -> str:
        """Merge two adjacent open shards (``shard`` the one with the lower hash keys); returns the child's id."""
        self._call(stream, "merge_shards", StreamName=stream, ShardToMerge=shard, AdjacentShardToMerge=adjacent)
        return self._wait_children(stream, shard)[0]

    def _wait_children(self, stream: str, parent: str, timeout_s: float = 60.0) -> list[str]:
        self._wait_active(stream, timeout_s)
        mapper, _ = self._listing(stream, max_age_s=0)
        return list(mapper.children(parent))

    def _wait_active(self, stream: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            summary = self._call(stream, "describe_stream_summary", StreamName=stream)["StreamDescriptionSummary"]
            if summary["StreamStatus"] == "ACTIVE":
                self._listings.pop(stream, None)
                return
            if time.monotonic() > deadline:
                raise StreamError(f"Kinesis stream {stream!r} is still {summary['StreamStatus']} after {timeout_s} s")
            time.sleep(0.05)

    # ---------------------------------------------------------------- consumer

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
        delay = self.settings.backoff_base_s
        held_up = False
        while True:
            try:
                result = self._read(stream, partition, start, end)
            except _Unreachable as error:
                held_up = True
                left = began + self.settings.read_timeout_s - time.monotonic()
                if left <= 0:
                    raise StreamError(
                        f"{error}; a read waited {self.settings.read_timeout_s:g}s for it (check the endpoint and "
                        "the network, or raise systems.kinesis.read_timeout_s to wait out longer outages)"
                    ) from None
                time.sleep(min(random.uniform(delay / 2, delay), left))
                delay = min(delay * 2, self.settings.backoff_cap_s)
                continue
            if not held_up:
                return result
            # Held up by a silent endpoint for at most the read's whole time: the task reports it as an outage.
            return replace(result, stats={**result.stats, "outage_s": time.monotonic() - began})

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
        ended = 0
        for i, shard in enumerate(order):
            quota = None if budget is None else (budget - len(rows)) // (len(order) - i)
            if quota == 0 and budget is not None:
                continue
            result = self._read_shard(stream, shard, states[shard], quota, targets.get(shard), deadline, stats)
            rows += result.rows
            ended += result.state == SHARD_END
            states[shard] = result.state
        if pinned is not None:
            for shard, target in targets.items():
                if target is not None and states[shard] != target:
                    raise StreamError(
                        f"Kinesis stream {stream!r} slot {partition}: a replayed micro-batch could not reach shard "
                        f"{shard} at {target} (it stopped at {states[shard]}); the records it read first are gone"
                    )
            if here.n + transitions + len(rows) + ended != pinned.n:
                raise StreamError(
                    f"Kinesis stream {stream!r} slot {partition}: a replayed micro-batch read {len(rows)} records "
                    "where the first read counted a different number; refusing to return other records"
                )
            next_position = end if isinstance(end, str) else pinned.encode()
        else:
            next_position = SlotPosition(states, here.n + transitions + len(rows) + ended).encode()
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
    ) -> _ShardRead:
        """Records of one shard after ``state``: at most ``quota``, or up to ``target``, or until caught up."""
        rows: list[tuple[str, str, str, bytes, datetime]] = []
        if state in (SHARD_END, target):
            return _ShardRead(rows, state, True)
        iterator, verify = self._iterator(stream, shard, state, stats)
        limit_cap = self.settings.get_records_limit
        records_limiter = self._limiter(stream, shard, "records")
        while True:
            want = limit_cap if quota is None else min(limit_cap, quota - len(rows) + (1 if verify else 0))
            waited = records_limiter.acquire()
            stats["rate_limited_ms"] += int(waited * 1000)
            try:
                page = self._call(stream, "get_records", stats, ShardIterator=iterator, Limit=want)
            except _ExpiredIterator:
                stats["iterator_renewals"] += 1
                iterator, verify = self._iterator(stream, shard, state, stats, fresh=True)
                continue
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
                    self._trimmed(stream, shard, verify, first, stats)
                    verify = None
            consumed = 0
            stop = False
            for record in records:
                sequence = record["SequenceNumber"]
                if target is not None and target != SHARD_END and state_key(sequence) > state_key(target):
                    raise StreamError(
                        f"Kinesis stream {stream!r} shard {shard}: a replayed micro-batch passed its pinned end "
                        f"{target} without finding it (now at {sequence}); the record was trimmed or never existed"
                    )
                arrival = record["ApproximateArrivalTimestamp"]
                rows.append((shard, sequence, record["PartitionKey"], record["Data"], arrival))
                state = sequence
                consumed += 1
                if sequence == target or (quota is not None and len(rows) >= quota):
                    stop = True
                    break
            following = page.get("NextShardIterator")
            whole_page = consumed == len(records)
            if following is None and whole_page:
                return _ShardRead(rows, SHARD_END, True)
            if whole_page and following is not None and verify is None:
                self._remember(stream, shard, state, following)
            if stop:
                return _ShardRead(rows, state)
            if not records and behind == 0:
                return _ShardRead(rows, state, True)  # caught up
            if records and len(records) + (0 if verify is None else 1) < want and behind == 0:
                return _ShardRead(rows, state, True)
            if time.monotonic() >= deadline:
                if target is not None:
                    return _ShardRead(rows, state)  # the caller reports the missed target
                return _ShardRead(rows, state)
            iterator = following  # type: ignore[assignment]

    def _iterator(
        self, stream: str, shard: str, state: str, stats: Counter[str], *, fresh: bool = False
    ) -> tuple[str, str | None]:
        """An iterator at ``state``, and the sequence number its first record must be (None: nothing to check)."""
        key = (os.getpid(), *self.settings.client_key(), stream, shard, state)
        if not fresh:
            with _LOCK:
                cached = _ITERATORS.pop(key, None)
            if cached is not None and time.monotonic() - cached[1] < ITERATOR_TTL_S:
                stats["iterators_reused"] += 1
                return cached[0], None
        self._limiter(stream, shard, "iterator").acquire()
        if state == TRIM_HORIZON:
            kwargs: dict[str, Any] = {"ShardIteratorType": "TRIM_HORIZON"}
        else:
            kwargs = {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": state}
        try:
            answer = self._call(stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, **kwargs)
        except _Trimmed:
            self._trimmed(stream, shard, state, None, stats)
            answer = self._call(
                stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
            )
            return answer["ShardIterator"], None
        return answer["ShardIterator"], (None if state == TRIM_HORIZON else state)

    def _remember(self, stream: str, shard: str, state: str, iterator: str) -> None:
        key = (os.getpid(), *self.settings.client_key(), stream, shard, state)
        with _LOCK:
            if len(_ITERATORS) > 10_000:
                for old in sorted(_ITERATORS, key=lambda k: _ITERATORS[k][1])[:5_000]:
                    del _ITERATORS[old]
            _ITERATORS[key] = (iterator, time.monotonic())

    def _trimmed(self, stream: str, shard: str, after: str, first: str | None, stats: Counter[str]) -> None:
        """Records after ``after`` were trimmed before they were read: fail loudly, or count and log (``skip``)."""
        if first is None:
            first = self._first_available(stream, shard)
        _, info = self._listing(stream)
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

    def _first_available(self, stream: str, shard: str) -> str | None:
        """The sequence number of a shard's oldest record still there (None: none left)."""
        stats: Counter[str] = Counter()
        answer = self._call(
            stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )
        iterator = answer["ShardIterator"]
        for _ in range(20):
            self._limiter(stream, shard, "records").acquire()
            page = self._call(stream, "get_records", stats, ShardIterator=iterator, Limit=1)
            if page.get("Records"):
                return page["Records"][0]["SequenceNumber"]
            iterator = page.get("NextShardIterator")
            if iterator is None or not page.get("MillisBehindLatest"):
                return None
        return None

    def acknowledge(self, job: str, stream: str, positions: Mapping[int, Position]) -> None:
        """Nothing: checkpoints live in the platform's Delta tables; the job model assigns shards, no KCL leases."""

    # ---------------------------------------------------------------- producer

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
        mapper, _ = self._listing(stream, max_age_s=0)
        index = {s: i for i, s in enumerate(mapper.open_shards())}
        result = []
        for shard, sequence in placed:  # type: ignore[misc]
            if shard not in index:  # resharded meanwhile
                mapper, _ = self._listing(stream, max_age_s=0)
                index = {s: i for i, s in enumerate(mapper.open_shards())}
            result.append((index.get(shard, -1), RecordPosition(shard, sequence).encode()))
        return result

    def _put(
        self, stream: str, items: list[tuple[str, bytes]], chunk: list[int], placed: list[tuple[str, str] | None]
    ) -> None:
        pending = chunk
        for attempt in range(1, self.settings.max_attempts + 1):
            answer = self._call(
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
            time.sleep(random.uniform(0, min(self.settings.backoff_cap_s, self.settings.backoff_base_s * 2**attempt)))
        raise StreamError(f"Kinesis stream {stream!r}: {len(pending)} records still failed after retries")

    def close(self) -> None:
        """Forget cached listings; clients, iterators and limiters are per process and shared, so they stay."""
        self._listings.clear()


# -------------------------------------------------------------------- helpers


class _Trimmed(StreamError):
    """An iterator at a sequence number that is not in the shard any more."""


class _ExpiredIterator(StreamError):
    """A shard iterator older than 5 minutes."""


class _Unreachable(StreamError):
    """The endpoint did not answer (connection refused or reset, a timeout): an outage, worth waiting out."""


def _stream_error(stream: str, error: Any, settings: KinesisSettings) -> StreamError:
    code = error.response.get("Error", {}).get("Code", "")
    message = error.response.get("Error", {}).get("Message", "") or str(error)
    lowered = message.lower()
    if code == "ExpiredIteratorException":
        return _ExpiredIterator(message)
    if (code == "ResourceNotFoundException" and "sequencenumber" in lowered.replace(" ", "")) or (
        code == "InvalidArgumentException" and "startingsequencenumber" in lowered.replace(" ", "")
    ):
        return _Trimmed(message)
    where = settings.endpoint_url or settings.region or "the default region"
    if code == "ResourceNotFoundException":
        return StreamError(f"Kinesis stream {stream!r} does not exist at {where} ({message})")
    if code == "ResourceInUseException":
        return StreamError(f"Kinesis stream {stream!r} is not usable now: {message} (ResourceInUseException)")
    return StreamError(f"Kinesis stream {stream!r}: {code or 'error'}: {message}")


def check_lineage_order(stream: str, shards: Iterable[ShardInfo]) -> None:
    """Children must have higher shard numbers than their parents: record positions rely on it for per-key order."""
    for info in shards:
        for parent in info.parents:
            if shard_ordinal(parent) >= shard_ordinal(info.shard_id):
                raise StreamError(
                    f"Kinesis stream {stream!r}: shard {info.shard_id} is numbered below its parent {parent}; record "
                    "positions order a key's records by shard number across reshards, which needs children numbered "
                    "after their parents"
                )


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
            if shard in _ancestors_of(mapper, other):
                holders.add(slot)
    if not holders:
        return None, None
    return (holders.pop() if len(holders) == 1 else None), SHARD_END


def _ancestors_of(mapper: ShardPartitionMapper, shard: str) -> set[str]:
    seen: set[str] = set()
    stack = [shard]
    while stack:
        info = mapper.shards.get(stack.pop())
        for parent in info.parents if info else ():
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


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


def _table(partition: int, rows: list[tuple[str, str, str, bytes, datetime]]) -> pa.Table:
    n = len(rows)
    return pa.Table.from_arrays(
        [
            pa.array([partition] * n, pa.int32()),
            pa.array([f"{r[0]}:{r[1]}" for r in rows], pa.string()),
            pa.array([r[2].encode("utf-8") for r in rows], pa.binary()),
            pa.array([r[3] for r in rows], pa.binary()),
            pa.array([_utc(r[4]) for r in rows], pa.timestamp("us", tz="UTC")),
            pa.nulls(n, pa.string()),
        ],
        schema=RECORD_SCHEMA,
    )


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


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def _arrival_ms(record: Mapping[str, Any]) -> int:
    return int(_utc(record["ApproximateArrivalTimestamp"]).timestamp() * 1000)


def _now_ms() -> int:
    return int(time.time() * 1000)
