"""What the job model needs to know about an input system, whatever the system is.

Kafka, Kinesis and the embedded Delta log differ in how they name partitions
and offsets, so offsets cross this boundary as strings (Kafka offsets and the
embedded log's offsets as decimal strings, Kinesis sequence numbers as they
come) and are only ever compared through ``SystemAdmin.offset_key``: comparing
the strings themselves would put "10" before "9".

``Expansion`` carries the point where a stream's partition count grew, which
DESIGN "Order across repartitioning" needs: a key that moves from partition
``p`` to ``p + k*N`` may only be read in its new partition once ``p`` has been
consumed past ``end_offsets[p]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition's readable range: ``[earliest, end)``; ``end`` is the next offset to be written."""

    partition: int
    earliest: str
    end: str


@dataclass(frozen=True)
class Expansion:
    """A partition expansion and the end offset of every old partition at the moment it happened.

    Records at offsets ``>= end_offsets[p]`` of an old partition ``p`` were
    written with ``to_partitions`` in force; everything before them with
    ``from_partitions``.
    """

    from_partitions: int
    to_partitions: int
    end_offsets: dict[int, str]
    at: datetime

    def source_partition(self, partition: int) -> int:
        """The old partition whose keys may now land in ``partition`` (SEP-5: ``p mod N``).

        Kafka's partitioner takes ``hash mod kN``; a key that was in ``p`` under
        N partitions is in some ``p'`` with ``p' mod N == p`` under kN.
        """
        return partition % self.from_partitions

    def new_partitions(self) -> range:
        return range(self.from_partitions, self.to_partitions)


@dataclass(frozen=True)
class StreamMetadata:
    """A stream's partitions and the history of its partition count, oldest expansion first."""

    system: str
    stream: str
    partitions: dict[int, PartitionMetadata]
    expansions: list[Expansion] = field(default_factory=list)

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@runtime_checkable
class SystemAdmin(Protocol):
    """The metadata side of an input system, enough for planning a job model and migrating checkpoints."""

    system: str

    def describe(self, stream: str) -> StreamMetadata: ...

    def offset_key(self, offset: str) -> Any:
        """A sort key with the system's own order of offsets (e.g. ``int`` for Kafka)."""
        ...
