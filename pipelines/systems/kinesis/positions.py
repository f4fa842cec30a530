"""Kinesis positions: the slot position, the record position and the time target, and their order.

Only the Kinesis system's modules read these (``pipelines.systems.base``: no
one else parses a position). Pure, no boto3, so the formats are unit-tested.
A slot position is canonical JSON, restored exactly; sequence numbers compare
as integers, never as strings; ``TRIM_HORIZON`` sorts first and ``SHARD_END``
last, as in KCL. The formats and why each is so: docs/systems/kinesis.md,
"Positions".
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipelines.core.shards import SHARD_END, TRIM_HORIZON
from pipelines.errors import StreamError

SYSTEM = "kinesis"
_SEQUENCE = re.compile(r"^\d{1,128}$")
_SHARD = re.compile(r"^shardId-(\d{1,20})$")
_SUB = re.compile(r"^\d{1,10}$")


@dataclass(frozen=True)
class SlotPosition:
    """A slot's checkpoint: each shard's state, the slot's progress ``n``, and which stream of the name it is in.

    ``created`` is the stream's creation time in ms (``StreamCreationTimestamp``). Shard ids and sequence numbers
    name nothing outside their stream, and a stream deleted and created again under the same name starts over at
    ``shardId-000000000000`` (kinesis-mock even numbers its records as it numbered the old one's), so the time
    tells the stream the slot read from one that replaced it, as KCL 2.x's stream identifier does with the
    creation epoch. ``None`` in a checkpoint written before it was recorded: such a slot is not checked.

    ``since`` is the time in ms a job created with ``start: latest`` or ``start: <time>`` starts at (KCL's
    ``LATEST`` and ``AT_TIMESTAMP``): a shard at ``TRIM_HORIZON`` in such a slot is read from its first record
    that arrived at or after it (an ``AT_TIMESTAMP`` iterator), the shards open at the start as the children
    taken over later, so records that arrived before it are never read. ``None``: from the horizon.
    """

    shards: Mapping[str, str] = field(default_factory=dict)
    n: int = 0
    created: int | None = None
    since: int | None = None

    def encode(self) -> str:
        value: dict[str, Any] = {} if self.created is None else {"created": self.created}
        value.update(n=self.n, shards=dict(sorted(self.shards.items())))
        if self.since is not None:
            value["since"] = self.since
        return json.dumps(value, separators=(",", ":"))

    def unfinished(self) -> list[str]:
        return sorted((s for s, v in self.shards.items() if v != SHARD_END), key=shard_ordinal)


@dataclass(frozen=True)
class RecordPosition:
    """A record's place: ``shardId-N:sequence``, and ``:i`` for the i-th user record of a KPL aggregate.

    The sub-sequence number is KCL's (``ExtendedSequenceNumber``): the user records of one aggregate share its
    sequence number and follow each other in the order the producer added them.
    """

    shard: str
    sequence: str
    sub: int | None = None

    def encode(self) -> str:
        return f"{self.shard}:{self.sequence}" if self.sub is None else f"{self.shard}:{self.sequence}:{self.sub}"


@dataclass(frozen=True)
class TimeTarget:
    arrived_before_ms: int

    def encode(self) -> str:
        return json.dumps({"arrived_before_ms": self.arrived_before_ms}, separators=(",", ":"))


def shard_ordinal(shard_id: str) -> int:
    """The creation number in ``shardId-<n>``; Kinesis numbers a stream's shards in creation order."""
    m = _SHARD.fullmatch(shard_id) if isinstance(shard_id, str) else None
    if m is None:
        raise StreamError(f"{shard_id!r} is not a Kinesis shard id (shardId-<number>)")
    return int(m[1])


def check_sequence(value: str) -> str:
    if not isinstance(value, str) or not _SEQUENCE.fullmatch(value):
        raise StreamError(f"{value!r} is not a Kinesis sequence number (decimal digits)")
    return value


def check_state(shard: str, state: str) -> str:
    shard_ordinal(shard)
    if state in (TRIM_HORIZON, SHARD_END):
        return state
    return check_sequence(state)


def state_key(state: str) -> tuple[int, int]:
    """A shard state's place in its shard's order: TRIM_HORIZON < sequence numbers (as integers) < SHARD_END."""
    if state == TRIM_HORIZON:
        return (0, 0)
    if state == SHARD_END:
        return (2, 0)
    return (1, int(check_sequence(state)))


def decode(position: str) -> SlotPosition | RecordPosition | TimeTarget:
    if not isinstance(position, str) or not position:
        raise StreamError(f"not a {SYSTEM} position: {position!r}")
    if position[0] != "{":
        shard, sep, sequence = position.partition(":")
        sequence, sub_sep, sub = sequence.partition(":")
        if not sep or (sub_sep and not _SUB.fullmatch(sub)):
            raise StreamError(f"not a {SYSTEM} position: {position!r:.200}")
        shard_ordinal(shard)
        return RecordPosition(shard, check_sequence(sequence), int(sub) if sub_sep else None)
    try:
        value: Any = json.loads(position)
    except ValueError:
        raise StreamError(f"not a {SYSTEM} position: {position!r:.200}") from None
    if isinstance(value, dict) and set(value) == {"arrived_before_ms"}:
        ms = value["arrived_before_ms"]
        if isinstance(ms, int) and not isinstance(ms, bool):
            return TimeTarget(ms)
    if isinstance(value, dict) and {"n", "shards"} <= set(value) <= {"created", "n", "shards", "since"}:
        n, shards, created, since = value["n"], value["shards"], value.get("created"), value.get("since")
        optional = all(key not in value or _count(value[key]) for key in ("created", "since"))
        if _count(n) and isinstance(shards, dict) and optional:
            return SlotPosition({str(s): check_state(str(s), v) for s, v in shards.items()}, n, created, since)
    raise StreamError(f"not a {SYSTEM} position: {position!r:.200}")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def decode_slot(position: str) -> SlotPosition:
    value = decode(position)
    if not isinstance(value, SlotPosition):
        raise StreamError(f"expected a {SYSTEM} slot position (a checkpoint), got {position!r:.200}")
    return value


def decode_record(position: str) -> RecordPosition:
    value = decode(position)
    if not isinstance(value, RecordPosition):
        raise StreamError(
            f"expected a {SYSTEM} record position (shard:sequence, or shard:sequence:sub), got {position!r:.200}"
        )
    return value


def position_key(position: str) -> tuple[int, ...]:
    """Record positions by (shard ordinal, sequence); a slot's positions by progress; targets by time.

    The three kinds are not comparable with each other (whether a checkpoint
    has read a record is ``unread``'s question); the leading tag only keeps
    sorting a mixed list from raising.
    """
    value = decode(position)
    if isinstance(value, RecordPosition):
        return (0, shard_ordinal(value.shard), int(value.sequence), -1 if value.sub is None else value.sub)
    if isinstance(value, SlotPosition):
        return (1, value.n)
    return (2, value.arrived_before_ms)


def iterator_at(state: str, since: int | None) -> dict[str, Any]:
    """GetShardIterator's arguments for the first record after ``state`` in a slot that started at ``since``."""
    if state != TRIM_HORIZON:
        return {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": check_sequence(state)}
    if since is None:
        return {"ShardIteratorType": "TRIM_HORIZON"}
    return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": datetime.fromtimestamp(since / 1000, UTC)}


def unread_in_shard(sequence: str, state: str) -> bool:
    """Whether a reader whose shard state is ``state`` has yet to read the record ``sequence`` of that shard."""
    return state_key(state) < (1, int(check_sequence(sequence)))


def utc(value: datetime) -> datetime:
    """A record's arrival time in UTC (boto3 answers with the local zone, or none)."""
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def arrival_ms(record: Mapping[str, Any]) -> int:
    """When Kinesis received a record, in the milliseconds a ``TimeTarget`` is stated in."""
    return int(utc(record["ApproximateArrivalTimestamp"]).timestamp() * 1000)


def now_ms() -> int:
    return int(time.time() * 1000)
