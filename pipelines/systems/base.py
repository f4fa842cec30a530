"""The input-system boundary: everything the platform asks of Kafka, Kinesis or the embedded log.

One protocol, ``InputSystem``, in three roles (Samza's SystemAdmin,
SystemConsumer and SystemProducer; Flink's enumerator and reader):

* **admin** (the driver and the operations): describe a stream's partitions
  and their history, name its end positions, count records between two
  positions where the system can, plan how far a micro-batch may read, and
  create or expand streams where the system allows it;
* **consumer** (executors): read one partition from a position, either up to
  a named position or "at most N records", and say where the next read
  starts;
* **producer** (tests, demos, benchmarks): append keyed records.

Positions are opaque
    A ``Position`` is a string only the system that made it understands: a
    Kafka or embedded-log offset ("next offset to read"), a Kinesis slot's
    composite of shard sequence numbers. Nothing outside a system's own
    module parses one, does arithmetic on one, or compares two as strings
    (``"10" < "9"``). The platform only ever

    * orders positions *of the same partition* with ``position_key``,
    * asks ``records_between`` (which may answer ``None``: "not countable",
      e.g. Kinesis, whose lag is reported as time, never guessed),
    * asks ``advance`` for the end of a read of at most N records, which is
      either a position (Kafka, the embedded log: offsets can be added to)
      or a ``Bounded`` end the system can only name by reading (Kinesis:
      sparse sequence numbers). The runtime pins a bounded end to the
      position the first read of it returned, durably, so a replayed
      micro-batch reads exactly the same records (never
      ``end = start + n``; transactions and compaction leave gaps).

    A record's own position (the ``offset`` column of ``RECORD_SCHEMA``, the
    lineage the sink keeps) identifies it within its partition. Whether a
    reader at checkpoint ``c`` has read a record is the system's answer
    (``unread``): for offsets it is ``offset >= c``, for a Kinesis slot that
    holds several shards it depends on the record's shard. ``position_key``
    of record positions orders the records of one key as the input did (the
    per-key order check relies on it). A checkpoint is the next position to
    read, as in Samza and Kafka.

Holding partitions back
    Order across repartitioning (docs/design.md): a partition created by an expansion
    may only be read once the partition its keys came from is read past the
    expansion point. Systems say how far each partition may be read now
    (``read_limits``); the embedded log derives it from the expansion points
    it recorded, with ``pipelines.core.batchplan.expansion_holds``. The rest
    of the batch plan (sharing the budget, moving key buckets together) is
    pure, in ``pipelines.core.batchplan``.

Three roles, one object: each role is a protocol of its own (``SystemAdmin``,
``SystemReader``, ``SystemProducer``) that a system's role modules implement,
and ``ComposedSystem`` answers ``InputSystem`` with them, so every caller
still holds one object per system and asks what it needs. A system that
cannot do something (create topics on a cluster the platform does not own,
expand a Kinesis stream by a partition count) raises ``StreamError`` with the
reason.

Optional abilities
    What only some systems can do is a protocol of its own beside
    ``InputSystem``, named as Flink names its source abilities
    (``Supports*``): ``SupportsRelayout``, ``SupportsRecordsRead``,
    ``SupportsLineage``, ``SupportsCommitted``. Callers ask with
    ``isinstance(system, SupportsRelayout)``, never by probing for a method
    name, so the ability is declared in one place, type-checked, and held to
    its contract by the contract suite (``tests/integration/systems``): a
    system whose method is renamed stops being ``SupportsRelayout`` and fails
    a test instead of being planned as something else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from pipelines.core.positions import Bounded, End, Expansion, Position
from pipelines.errors import InputRewoundError

__all__ = [
    "ABILITIES",
    "RECORD_SCHEMA",
    "Bounded",
    "ComposedSystem",
    "End",
    "Expansion",
    "InputSystem",
    "PartitionMetadata",
    "Position",
    "Positions",
    "ReadResult",
    "Record",
    "Settings",
    "StreamMetadata",
    "SupportsCommitted",
    "SupportsIdentity",
    "SupportsLineage",
    "SupportsRecordsRead",
    "SupportsRelayout",
    "SupportsStartAtTime",
    "SystemAdmin",
    "SystemProducer",
    "SystemReader",
]

Settings = Mapping[str, Any]
"""A system's settings from the job's ``systems:`` section (e.g. Kafka's bootstrap servers); never secrets in clear."""

Positions = Mapping[int, Position]
"""A position per partition: a job's checkpoints, floors, a micro-batch's ends."""

Record = tuple[bytes | None, bytes, Mapping[str, str] | None]
"""What a producer appends: key bytes (None: no key), value bytes, string headers (or None)."""

RECORD_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.string(), nullable=False),  # the record's own position
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("headers", pa.string()),  # JSON object of strings, or null
    ]
)
"""What every consumer returns, records in the partition's order; the key bucket is computed on ``key``."""


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition's readable range now: ``earliest`` is where a new reader starts, ``end`` the next to be written.

    ``end`` is the last stable position a reader may reach (Kafka: the last
    stable offset under read-committed, not the high watermark). Systems that
    cannot name it (Kinesis) give a position ``reached`` understands.
    """

    partition: int
    earliest: Position
    end: Position
    details: Mapping[str, Any] = field(default_factory=dict)
    """System-specific facts for people (Kinesis: the shards in this slot and their lineage)."""


@dataclass(frozen=True)
class StreamMetadata:
    """A stream's partitions and the history of its partition count, oldest expansion first."""

    system: str
    stream: str
    partitions: dict[int, PartitionMetadata]
    expansions: list[Expansion] = field(default_factory=list)
    details: Mapping[str, Any] = field(default_factory=dict)
    """System-specific facts for people (Kafka: brokers and consumer-group lag; Kinesis: shard lineage)."""

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True)
class ReadResult:
    """One read of one partition: its records in order, and where the next read starts.

    ``next_position`` is what the system says is next (Kafka: the consumer's
    position after the last record, past any transaction markers), never a
    count added to the start.
    """

    records: pa.Table  # RECORD_SCHEMA
    next_position: Position
    bytes_fetched: int = 0
    stats: Mapping[str, float] = field(default_factory=dict)
    """Counters for the metrics table (e.g. Kinesis: ``throttled``, ``millis_behind_latest``)."""


class SystemAdmin(Protocol):
    """The driver's role (Flink's split enumerator, Samza's SystemAdmin, confluent-kafka's ``AdminClient``):
    what a stream holds and how far one micro-batch may read it."""

    def describe(self, stream: str) -> StreamMetadata:
        """Partitions with their earliest and end positions, and the stream's expansion history."""
        ...

    def end_positions(self, stream: str) -> dict[int, Position]:
        """The end (next to be written, or last stable) position of every partition, now; cheaper than describe."""
        ...

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int | None:
        """Records in ``[start, end)``, or None when the system cannot count them without reading."""
        ...

    def read_limits(self, stream: str, floors: Positions) -> dict[int, Position | None]:
        """Partitions that may not be read freely now, given where each partition's slowest key bucket stands.

        A partition maps to the position it may be read up to (exclusive), or
        None when it may not be read at all yet; partitions not in the result
        may be read to their end. This is where an expansion's hold-back lives.
        """
        ...

    def advance(self, stream: str, floors: Positions, records: Mapping[int, int], limits: Positions) -> dict[int, End]:
        """The end of this micro-batch's read of each partition in ``records``: at most that many records after
        its floor, and not past its limit; a ``Bounded`` end where the system cannot name it without reading."""
        ...

    def create(self, stream: str, partitions: int, retention_ms: int | None = None) -> StreamMetadata:
        """Create a stream (tests, demos), with its own retention (``SupportsRetention``); raises ``StreamError``
        where the platform may not create streams."""
        ...

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        """Grow a stream to a multiple of its partition count; anything else is refused with the reason."""
        ...


class SystemReader(Protocol):
    """The executors' role (Flink's source reader, Samza's SystemConsumer): one partition's records."""

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        """The records of ``partition`` from ``start`` up to ``end`` (a position, exclusive, or a ``Bounded``).

        ``columns`` is a hint (verification reads only ``offset``); the table
        always has ``RECORD_SCHEMA``'s columns, unrequested ones may be null.
        """
        ...


class SystemProducer(Protocol):
    """The producer's role (tests, demos, benchmarks; Samza's SystemProducer)."""

    def produce(self, stream: str, records: Iterable[Record]) -> list[tuple[int, Position]]:
        """Append records, placed by key as the system's own producers would; (partition, position) each."""
        ...


@runtime_checkable
class InputSystem(SystemAdmin, SystemReader, SystemProducer, Protocol):
    """Admin, reader and producer of one input system, with its positions' order; see the module docstring."""

    system: str

    def position_key(self, position: Position) -> Any:
        """A sort key with the system's order of the positions of one partition (e.g. ``int`` for offsets)."""
        ...

    def reached(self, stream: str, partition: int, position: Position, target: Position) -> bool:
        """Whether a reader at ``position`` has read everything before ``target`` (a past ``end_positions``)."""
        ...

    def unread(self, stream: str, partition: int, records: Sequence[Position], position: Position) -> list[bool]:
        """For each record position, whether a reader at checkpoint ``position`` has yet to read that record."""
        ...

    def acknowledge(self, job: str, stream: str, positions: Positions) -> None:
        """Tell the system's own tools how far ``job`` has committed (Kafka: the job's consumer group).

        Called after each committed micro-batch with every partition's floor;
        the Delta checkpoints stay the truth, so a failure here is reported,
        never fatal. Systems without such tools do nothing.
        """
        ...

    def connect(self) -> None:
        """Make this process's clients now (their imports, their connections), asking the system nothing.

        A query started ahead of an in-place switch calls it before its gate, so a fresh source process pays for
        its clients outside the switch's downtime (docs/operations.md, "Where a switch's time goes"). Nothing it
        learns may be used by a plan: the plan after the gate must see the stream as it is then.
        """
        ...

    def close(self) -> None:
        """Release clients and connections; the object must not be used afterwards."""
        ...


class ComposedSystem:
    """An ``InputSystem`` put together from its three role objects, answering each role's questions with them.

    Each system (``KafkaSystem``, ``KinesisSystem``, ``DeltaLog``) sets
    ``admin``, ``reader`` and ``producer`` and adds what is its own (the order
    of its positions, its optional abilities, ``acknowledge``, ``close``);
    callers keep holding one object per system.
    """

    admin: SystemAdmin
    reader: SystemReader
    producer: SystemProducer

    def connect(self) -> None:
        """Nothing to make ahead (the embedded log opens its tables at each read)."""

    def describe(self, stream: str) -> StreamMetadata:
        return self.admin.describe(stream)

    def end_positions(self, stream: str) -> dict[int, Position]:
        return self.admin.end_positions(stream)

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int | None:
        return self.admin.records_between(stream, partition, start, end)

    def read_limits(self, stream: str, floors: Positions) -> dict[int, Position | None]:
        return self.admin.read_limits(stream, floors)

    def advance(self, stream: str, floors: Positions, records: Mapping[int, int], limits: Positions) -> dict[int, End]:
        return self.admin.advance(stream, floors, records, limits)

    def create(self, stream: str, partitions: int, retention_ms: int | None = None) -> StreamMetadata:
        return self.admin.create(stream, partitions, retention_ms)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        return self.admin.expand(stream, partitions)

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        return self.reader.read(stream, partition, start, end, columns=columns)

    def produce(self, stream: str, records: Iterable[Record]) -> list[tuple[int, Position]]:
        return self.producer.produce(stream, records)


# -------------------------------------------------------------------- optional abilities


@runtime_checkable
class SupportsRelayout(Protocol):
    """Partitions that are *slots* over a changing set of underlying units (Kinesis: shards over reshards).

    A slotted stream's partition count may change in any direction (one slot
    per open shard); the job's grouper and the "never shrink" rule do not
    apply to it, and its checkpoints are laid out again by the system, never
    migrated bucket by bucket from the old slot count.
    """

    def relayout(self, stream: str, positions: Mapping[int, Position], partitions: int) -> dict[int, Position]:
        """Where each of ``partitions`` new slots starts, given every old slot's checkpoint.

        Every unit keeps its state across the new layout: nothing is read
        twice or skipped, and ``positions`` at the stream's start give a
        layout that reads every record once.
        """
        ...


@runtime_checkable
class SupportsRecordsRead(Protocol):
    """Partitions that are not ranges of positions, so "what was read" must be listed by the system.

    The data-quality checks ask it instead of reading ``[start, end)`` of each
    partition (a Kinesis slot's two checkpoints do not bound a range of one
    shard).
    """

    def records_read(
        self, stream: str, starts: Mapping[int, Position], ends: Mapping[int, Position]
    ) -> list[tuple[int | None, Position]]:
        """Every record read after ``starts`` (a partition missing: from the job's start) up to ``ends``.

        Each with the partition that read it, or None when the checkpoints no
        longer say which one did.
        """
        ...

    def records_read_keyed(
        self, stream: str, starts: Mapping[int, Position], ends: Mapping[int, Position]
    ) -> list[tuple[int | None, Position, bytes]]:
        """``records_read`` with each record's key, as the job's reader hands it over (the state check counts
        each key's records)."""
        ...


@runtime_checkable
class SupportsLineage(Protocol):
    """A stream made of units with parents and children (Kinesis shards), shown to operators."""

    def lineage(self, stream: str, positions: Mapping[int, Position]) -> dict[str, dict[str, Any]]:
        """Every listed unit with ``parents``, ``children``, ``open``, the ``slot`` reading it and its ``state``,
        as a job at ``positions`` (its checkpoints per partition) sees it."""
        ...


@runtime_checkable
class SupportsCommitted(Protocol):
    """A system whose own tools keep a group's progress (Kafka consumer groups), written by ``acknowledge``."""

    def committed(self, group: str, stream: str) -> dict[int, Position]:
        """What ``group`` has committed per partition (partitions without a commit omitted)."""
        ...


@runtime_checkable
class SupportsRetention(Protocol):
    """A stream's own retention, set by the operator (the embedded log's metadata, a Kafka topic's ``retention.ms``,
    a Kinesis stream's retention period).

    Values in ms, ``-1`` keeping every record (``core.segments.RETAIN_FOREVER``), ``None`` leaving it to the
    default (the ``stream_maintenance`` DAG's ``older_than``; the broker's ``log.retention.*``; Kinesis's 24 h, which
    Kinesis always reports as the stream's period). A system refuses what it cannot keep (Kinesis: ``forever``,
    less than a day, more than 365 days, parts of an hour) with ``ConfigError`` before it changes anything.
    """

    def create(self, stream: str, partitions: int, retention_ms: int | None = None) -> StreamMetadata: ...

    def set_retention(self, stream: str, retention_ms: int | None) -> StreamMetadata: ...

    def retention(self, stream: str) -> int | None: ...


@runtime_checkable
class SupportsStartAtTime(Protocol):
    """Partitions whose records carry a time a reader can start from (Kafka's ``offsetsForTimes``).

    A new job's ``start: <time>`` asks it once, at ``job create``
    (``core.start``); a system without it refuses such a start.
    """

    def positions_at(self, stream: str, at_ms: int) -> dict[int, Position]:
        """Per partition, the position of its first record whose timestamp is at or after ``at_ms`` (milliseconds
        since the epoch), or its end when no record is: what a new reader starting at that time reads first.

        Slots over shards (``SupportsRelayout``) have neither: theirs are positions that hold the time, from which
        a reader reads exactly the records that arrived at or after it (a Kinesis ``AT_TIMESTAMP``); a new job's
        ``start: latest`` asks them for the time of ``job create``."""
        ...


@runtime_checkable
class SupportsIdentity(Protocol):
    """Streams with an identity of their own, which a stream deleted and created again under the name does not
    share: a Kafka topic's id (KIP-516), the Delta table id of an embedded-log stream.

    Recorded with every job model and compared while the job reads (``pipelines.systems.identity``): offsets
    start over in a stream made again, so a checkpoint in the old one names other records in the new one.
    """

    def identity(self, stream: str) -> str:
        """The stream's id now; a ``StreamError`` when it cannot be asked (missing, unreachable)."""
        ...


ABILITIES: tuple[type, ...] = (
    SupportsRelayout,
    SupportsRecordsRead,
    SupportsLineage,
    SupportsCommitted,
    SupportsStartAtTime,
    SupportsIdentity,
)
"""Every optional ability; the contract suite checks each system declares exactly the ones it keeps."""


def empty_records() -> pa.Table:
    return RECORD_SCHEMA.empty_table()


def check_not_rewound(
    system: InputSystem,
    stream: str,
    positions: Mapping[int, Position],
    ends: Mapping[int, Position],
    *,
    reader: str,
    then: str,
) -> None:
    """``InputRewoundError`` for the first partition whose end lies before the position ``reader`` has reached in
    it (``then``: what the reader does about it); never for slotted streams (Kinesis), whose positions have no
    such order.

    A partition's end never moves back while its stream lives (Kafka's last stable offset, the embedded log's
    end, which trims and compactions keep), and a reader's position was once a position the partition had
    reached. So an end behind it means the stream is not the one the reader read: deleted and created again
    under its name, or cut back (an unclean leader election, a table restored to an older version). A reader
    that went on would wait at its old position, then skip the new stream's records below it, silently; so it
    stops, as Spark's ``failOnDataLoss`` does.
    """
    if isinstance(system, SupportsRelayout):
        return
    for p, position in sorted(positions.items()):
        end = ends.get(p)
        if end is not None and system.position_key(position) > system.position_key(end):
            raise InputRewoundError(
                f"stream {stream!r} partition {p} ends at {end}, before {reader} at {position}: the stream was "
                f"deleted and created again, or lost records it had; {then}"
            )
