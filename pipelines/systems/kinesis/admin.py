"""The driver's side of Kinesis: shard listings, slot layouts, batch plans, resharding and lineage.

A job model's partitions of a Kinesis stream are slots; which shards a slot
reads is decided from the slots' checkpoints alone by
``pipelines.core.shards`` (parent before child, free slots first, then 1:n
sharing), so no lease table is needed. This module lists the shards, answers
the admin questions of ``InputSystem`` from that listing, plans how far each
slot reads in a micro-batch (``advance``), lays slots out again after a
reshard (``relayout``), and creates, deletes and reshards streams (tests,
demos). See docs/systems/kinesis.md, "Slots, not shards".
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pipelines.core.segments import RETAIN_FOREVER, retention_text, valid_retention
from pipelines.core.shards import SHARD_END, ShardInfo, ShardPartitionMapper
from pipelines.errors import ConfigError, StreamError
from pipelines.systems.base import Bounded, End, PartitionMetadata, Position, Positions, StreamMetadata
from pipelines.systems.kinesis.client import KinesisClient, NotYet, Trimmed, recreated
from pipelines.systems.kinesis.positions import (
    SYSTEM,
    SlotPosition,
    TimeTarget,
    arrival_ms,
    decode,
    decode_record,
    decode_slot,
    iterator_at,
    now_ms,
    shard_ordinal,
    state_key,
    unread_in_shard,
    utc,
)

HOUR_MS = 3_600_000

_CREATED_LOCK = threading.Lock()
_CREATED: dict[tuple[Any, ...], tuple[int | None, float]] = {}
"""Per process: each stream's creation time and when it was asked (``KinesisAdmin.created``)."""
DEFAULT_RETENTION_HOURS = 24
MAX_RETENTION_HOURS = 8760
"""Kinesis keeps a stream's records 24 h unless told otherwise, and at most 365 days, in whole hours."""


def retention_hours(retention_ms: int | None) -> int:
    """The retention period Kinesis is asked for, from a stream's own retention in ms (``None``: Kinesis's default,
    24 h); anything Kinesis would refuse is refused here first, in its words, with nothing sent."""
    valid_retention(retention_ms)
    if retention_ms is None:
        return DEFAULT_RETENTION_HOURS
    if retention_ms == RETAIN_FOREVER:
        raise ConfigError(
            f"a Kinesis stream keeps its records at most {MAX_RETENTION_HOURS}h (365d), never forever: "
            f"give an age from {DEFAULT_RETENTION_HOURS}h to 365d"
        )
    hours, rest = divmod(retention_ms, HOUR_MS)
    if rest or not DEFAULT_RETENTION_HOURS <= hours <= MAX_RETENTION_HOURS:
        raise ConfigError(
            f"a Kinesis stream's retention period is whole hours from {DEFAULT_RETENTION_HOURS}h to "
            f"{MAX_RETENTION_HOURS}h (365d), got {retention_text(retention_ms)}"
        )
    return hours


class KinesisAdmin:
    """Listings and the admin questions of one region/endpoint's streams; a listing is cached briefly."""

    def __init__(self, client: KinesisClient) -> None:
        self.client = client
        self._listings: dict[str, tuple[float, ShardPartitionMapper, dict[str, Any]]] = {}

    # ---------------------------------------------------------------- listing

    def listing(self, stream: str, max_age_s: float = 0.5) -> tuple[ShardPartitionMapper, dict[str, Any]]:
        """The stream's shards (ListShards) and summary; cached briefly so one micro-batch plans on one listing."""
        cached = self._listings.get(stream)
        now = time.monotonic()
        if cached is not None and now - cached[0] <= max_age_s:
            return cached[1], cached[2]
        call = self.client.call
        summary = call(stream, "describe_stream_summary", StreamName=stream)["StreamDescriptionSummary"]
        status = summary.get("StreamStatus")
        if status not in ("ACTIVE", "UPDATING"):
            raise StreamError(
                f"Kinesis stream {stream!r} is {status}, not ACTIVE"
                + ("; it is being deleted" if status == "DELETING" else "; wait until it is created")
            )
        shards: list[ShardInfo] = []
        kwargs: dict[str, Any] = {"StreamName": stream}
        while True:
            page = call(stream, "list_shards", **kwargs)
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
            "created_ms": created_ms(summary),
            "status": status,
            "retention_hours": summary.get("RetentionPeriodHours"),
            "mode": (summary.get("StreamModeDetails") or {}).get("StreamMode"),
        }
        self._listings[stream] = (now, mapper, info)
        return mapper, info

    def open_shards(self, stream: str) -> list[str]:
        """The open shards now, ordered by hash key range (so neighbours are adjacent)."""
        mapper, _ = self.listing(stream, max_age_s=0)
        return mapper.open_shards()

    def forget(self) -> None:
        self._listings.clear()

    # ---------------------------------------------------------------- admin

    def positions_at(self, stream: str, at_ms: int) -> dict[int, Position]:
        """A new job's slots for ``start: <time>`` (or ``latest``, the time of ``job create``): ``describe``'s
        layout, every slot starting at ``at_ms`` (``SlotPosition.since``), KCL's ``AT_TIMESTAMP``."""
        return {
            p: replace(decode_slot(part.earliest), since=at_ms).encode()
            for p, part in self.describe(stream).partitions.items()
        }

    def describe(self, stream: str) -> StreamMetadata:
        """The layout a new job starts with: one slot per open shard, the oldest listed shards in them."""
        mapper, info = self.listing(stream, max_age_s=0)
        count = max(1, len(mapper.open_shards()))
        layout = mapper.initial_layout(count)
        end = TimeTarget(now_ms()).encode()
        status = mapper.status(layout)
        partitions = {
            slot: PartitionMetadata(
                partition=slot,
                earliest=SlotPosition(shards, created=info["created_ms"]).encode(),
                end=end,
                details={"shards": {s: status[s] for s in sorted(shards, key=shard_ordinal)}},
            )
            for slot, shards in layout.items()
        }
        return StreamMetadata(
            system=SYSTEM,
            stream=stream,
            partitions=partitions,
            details={
                **info,
                "retention_ms": _period_hours(info) * HOUR_MS,  # as the other systems show it
                "open_shards": mapper.open_shards(),
                "shards": status,
            },
        )

    def lineage(self, stream: str, positions: Mapping[int, Position]) -> dict[str, dict[str, Any]]:
        """Every listed shard with parents, children, open/closed and the slot reading it, from a job's checkpoints."""
        mapper, _ = self.listing(stream, max_age_s=0)
        return mapper.status({p: decode_slot(pos).shards for p, pos in positions.items()})

    def end_positions(self, stream: str) -> dict[int, Position]:
        """A time per slot: "everything that arrived before now" (no end sequence number exists for open shards)."""
        mapper, _ = self.listing(stream)
        target = TimeTarget(now_ms()).encode()
        return dict.fromkeys(range(max(1, len(mapper.open_shards()))), target)

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
        self.check_same_stream(stream, [here])
        if isinstance(goal, SlotPosition):
            return here.n >= goal.n and all(
                state_key(here.shards.get(s, SHARD_END)) >= state_key(v) for s, v in goal.shards.items()
            )
        if not isinstance(goal, TimeTarget):
            raise StreamError(f"a reach target is a time or a slot position, got {target!r:.200}")
        if any(state == SHARD_END for state in here.shards.values()):
            return False
        stats: Counter[str] = Counter()
        call = self.client.call
        for shard in here.unfinished():
            kwargs = iterator_at(here.shards[shard], here.since)
            self.client.limiter(stream, shard, "iterator").acquire()
            try:
                iterator = call(stream, "get_shard_iterator", stats, StreamName=stream, ShardId=shard, **kwargs)
            except Trimmed:
                return False  # the read will report it
            except NotYet:
                continue  # nothing has arrived since the slot's start by the endpoint's clock
            self.client.limiter(stream, shard, "records").acquire()
            page = call(stream, "get_records", stats, ShardIterator=iterator["ShardIterator"], Limit=1)
            records = page.get("Records", [])
            if records:
                if arrival_ms(records[0]) < goal.arrived_before_ms:
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
        older: set[str] | None = None
        result = []
        for raw in records:
            record = decode_record(raw)
            state = slot.shards.get(record.shard)
            if state is not None:
                result.append(unread_in_shard(record.sequence, state))
                continue
            if older is None:
                older = ancestors(self.listing(stream)[0], slot.shards)
            result.append(record.shard not in older)
        return result

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int | None:
        """Kinesis cannot count records without reading them: lag is time (``millis_behind_latest``)."""
        return None

    def read_limits(self, stream: str, floors: Mapping[int, Position]) -> dict[int, Position | None]:
        """Nothing is held back by position: children are simply not in any slot until their parents are done."""
        return {}

    def advance(self, stream: str, floors: Positions, records: Mapping[int, int], limits: Positions) -> dict[int, End]:
        """At most N records per slot, each slot's plan decided here with every slot's floor in view.

        ``floors`` must hold every slot of the stream in the job: a shard in a
        slot the mapper is not shown looks unread.
        """
        mapper, _ = self.listing(stream)
        decoded = {p: decode_slot(pos) for p, pos in floors.items()}
        self.check_same_stream(stream, decoded.values())
        slots = {p: slot.shards for p, slot in decoded.items()}
        plans = mapper.plan(slots)
        return {p: Bounded(floors[p], max(0, n), plans[p].to_json()) for p, n in records.items()}

    def relayout(self, stream: str, positions: Mapping[int, Position], partitions: int) -> dict[int, Position]:
        """Where each of ``partitions`` new slots starts, given every old slot's checkpoint.

        The new job model (the 1:1 model after a reshard: ``partitions`` =
        open shards, ``describe(stream).partition_count``) starts from these:
        every shard keeps its state, so nothing is read twice or skipped, and
        children still wait for their parents (``ShardPartitionMapper.relayout``).
        """
        mapper, _ = self.listing(stream, max_age_s=0)
        old = {p: decode_slot(pos) for p, pos in positions.items()}
        self.check_same_stream(stream, old.values(), max_age_s=0)
        layout = mapper.relayout({p: s.shards for p, s in old.items()}, partitions)
        n = max((s.n for s in old.values()), default=0) + 1
        created = {s.created for s in old.values()}
        same = created.pop() if len(created) == 1 else None  # an old checkpoint without it leaves the slots unchecked
        since = max((s.since for s in old.values() if s.since is not None), default=None)  # one per job
        return {p: SlotPosition(shards, n, same, since).encode() for p, shards in layout.items()}

    def check_same_stream(self, stream: str, slots: Iterable[SlotPosition], max_age_s: float = 0.5) -> None:
        """Refuse slots read from an earlier stream of this name: it was deleted and created again since.

        Kinesis names the new stream's shards as it named the old one's (``shardId-000000000000`` on), so a
        slot's shard ids still match; its sequence numbers then name nothing, or (kinesis-mock, within a second)
        other records. The stream's creation time, recorded in every slot position, tells them apart.
        """
        _, info = self.listing(stream, max_age_s)
        check_created(stream, slots, info.get("created_ms"))

    def created(self, stream: str, max_age_s: float) -> int | None:
        """The stream's creation time in ms, by DescribeStreamSummary alone, known to this process for ``max_age_s``.

        For the executors' reads: a fresh iterator at a sequence number is checked against it, and many slots
        starting at once in one process share one call (Kinesis allows 20 DescribeStreamSummary a second per
        account). No shard listing: a read needs none.
        """
        key = (*self.client.key(), stream)
        now = time.monotonic()
        with _CREATED_LOCK:
            cached = _CREATED.get(key)
        if cached is not None and now - cached[1] <= max_age_s:
            return cached[0]
        summary = self.client.call(stream, "describe_stream_summary", StreamName=stream)["StreamDescriptionSummary"]
        value = created_ms(summary)
        with _CREATED_LOCK:
            _CREATED[key] = (value, now)
        return value

    # ---------------------------------------------------------------- streams (tests, demos)

    def create(self, stream: str, partitions: int, retention_ms: int | None = None) -> StreamMetadata:
        """Create a provisioned stream of ``partitions`` shards and wait until it is active; with a retention
        other than Kinesis's 24 h default, set it once the stream is active (CreateStream takes none)."""
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise StreamError(f"a Kinesis stream needs a shard count >= 1, got {partitions!r}")
        hours = retention_hours(retention_ms)
        try:
            self.client.call(stream, "create_stream", StreamName=stream, ShardCount=partitions)
        except StreamError as error:
            if "ResourceInUseException" in str(error):
                raise StreamError(f"Kinesis stream {stream!r} already exists") from None
            raise
        self._wait_active(stream)
        if hours != DEFAULT_RETENTION_HOURS:
            self._set_retention_hours(stream, hours, DEFAULT_RETENTION_HOURS)
        return self.describe(stream)

    def retention(self, stream: str) -> int:
        """The stream's retention period in ms: Kinesis always has one (24 h unless it was changed)."""
        _, info = self.listing(stream, max_age_s=0)
        return _period_hours(info) * HOUR_MS

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata:
        """Change the retention period (``None``: back to 24 h), as ``aws kinesis increase-`` or
        ``decrease-stream-retention-period`` does, and wait until the stream is active again. A shorter period
        makes Kinesis drop the records older than it: a job that had not read them stops on them, naming them."""
        hours = retention_hours(retention_ms)
        _, info = self.listing(stream, max_age_s=0)
        current = _period_hours(info)
        if hours != current:
            self._set_retention_hours(stream, hours, current)
        return self.describe(stream)

    def _set_retention_hours(self, stream: str, hours: int, current: int) -> None:
        operation = "increase_stream_retention_period" if hours > current else "decrease_stream_retention_period"
        self.client.call(stream, operation, StreamName=stream, RetentionPeriodHours=hours)
        self._wait_active(stream)

    def delete(self, stream: str) -> None:
        """Delete a stream (tests, demos); Kinesis finishes deleting it in the background."""
        self.client.call(stream, "delete_stream", StreamName=stream, EnforceConsumerDeletion=True)
        self._listings.pop(stream, None)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        raise StreamError(
            f"Kinesis stream {stream!r} is not expanded by a partition count: reshard it (split_shard / "
            "merge_shards here, or UpdateShardCount, SplitShard, MergeShards in AWS); the repartition watch then "
            "switches the job to one slot per open shard"
        )

    def split_shard(self, stream: str, shard: str, new_starting_hash_key: int | None = None) -> list[str]:
        """Split ``shard`` (at the middle of its hash range by default); returns the two children's ids."""
        mapper, _ = self.listing(stream, max_age_s=0)
        info = mapper.shards.get(shard)
        if info is None or not info.open:
            raise StreamError(f"Kinesis stream {stream!r} has no open shard {shard!r}; open: {mapper.open_shards()}")
        page = self.client.call(stream, "list_shards", StreamName=stream, ShardFilter={"Type": "AT_LATEST"})
        ranges = {s["ShardId"]: s["HashKeyRange"] for s in page.get("Shards", [])}
        lo, hi = int(ranges[shard]["StartingHashKey"]), int(ranges[shard]["EndingHashKey"])
        at = (lo + hi + 1) // 2 if new_starting_hash_key is None else new_starting_hash_key
        if not lo < at <= hi:
            raise StreamError(f"shard {shard!r} covers hash keys {lo}..{hi}; cannot split it at {at}")
        self.client.call(stream, "split_shard", StreamName=stream, ShardToSplit=shard, NewStartingHashKey=str(at))
        return self._wait_children(stream, shard)

    def merge_shards(self, stream: str, shard: str, adjacent: str) -> str:
        """Merge two adjacent open shards (``shard`` the one with the lower hash keys); returns the child's id."""
        self.client.call(stream, "merge_shards", StreamName=stream, ShardToMerge=shard, AdjacentShardToMerge=adjacent)
        return self._wait_children(stream, shard)[0]

    def _wait_children(self, stream: str, parent: str, timeout_s: float = 60.0) -> list[str]:
        self._wait_active(stream, timeout_s)
        mapper, _ = self.listing(stream, max_age_s=0)
        return list(mapper.children(parent))

    def _wait_active(self, stream: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self.client.call(stream, "describe_stream_summary", StreamName=stream)
            summary = answer["StreamDescriptionSummary"]
            if summary["StreamStatus"] == "ACTIVE":
                self._listings.pop(stream, None)
                return
            if time.monotonic() > deadline:
                raise StreamError(f"Kinesis stream {stream!r} is still {summary['StreamStatus']} after {timeout_s} s")
            time.sleep(0.05)


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


def ancestors(mapper: ShardPartitionMapper, shards: Iterable[str]) -> set[str]:
    """Every listed ancestor of ``shards`` (parents, their parents, ...)."""
    seen: set[str] = set()
    stack = list(shards)
    while stack:
        info = mapper.shards.get(stack.pop())
        for parent in info.parents if info else ():
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


def check_created(stream: str, slots: Iterable[SlotPosition], now: int | None) -> None:
    """``InputRewoundError`` if a slot was read from a stream of this name created at another time than ``now``."""
    for slot in slots:
        if slot.created is not None and now is not None and slot.created != now:
            raise recreated(
                stream,
                f"the job read the stream created at {_instant(slot.created)}; the stream of that name now was "
                f"created at {_instant(now)}",
            )


def created_ms(summary: Mapping[str, Any]) -> int | None:
    """A stream's creation time in ms, from its DescribeStreamSummary (None if the answer has none)."""
    created = summary.get("StreamCreationTimestamp")
    return int(utc(created).timestamp() * 1000) if created is not None else None


def _instant(ms: int) -> str:
    """A creation time as the user reads it: UTC, to the millisecond."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _period_hours(info: Mapping[str, Any]) -> int:
    """The period a listing shows, in hours: Kinesis's default when the summary gave none."""
    return int(info["retention_hours"] or DEFAULT_RETENTION_HOURS)
