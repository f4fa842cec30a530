"""Positions in an input system, and the few facts about them the pure core reasons with.

A ``Position`` is opaque (``pipelines.systems.base`` says why and what the
platform may do with one); these types live here, below the input systems,
because the batch plan and the checkpoint migration are pure logic that must
reason about positions without importing any system.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Position = str
"""An opaque, system-owned position: compared only through the system's ``position_key``."""


@dataclass(frozen=True)
class Expansion:
    """A partition expansion and every old partition's end position at the moment it happened.

    Records at or after ``end_offsets[p]`` of an old partition ``p`` were
    written with ``to_partitions`` in force; everything before them with
    ``from_partitions``.
    """

    from_partitions: int
    to_partitions: int
    end_offsets: dict[int, Position]
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
class Bounded:
    """The end of a read the system can only name by reading: at most ``records`` records after ``start``.

    ``plan`` is the system's own note for the reader, decided on the driver
    with every partition's position in view (Kinesis: the child shards a slot
    takes over now that their parents are read to their end); opaque to the
    platform, carried unchanged to ``read``.
    """

    start: Position
    records: int
    plan: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "records": self.records, "plan": self.plan}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Bounded:
        return cls(str(value["start"]), int(value["records"]), str(value.get("plan", "")))


End = Position | Bounded
"""The end of one read: a position the system named, or a ``Bounded`` end it names by reading."""
