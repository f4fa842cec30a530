"""Kafka positions: decimal "next offset to read" strings, as in Kafka's own commits (docs/systems/kafka.md).

Only this package turns one into an integer; offsets increase but are not
dense (markers, aborted transactions, compaction leave gaps). Pure, so
offline tools (``model migrate``) order positions without a client.
"""

from __future__ import annotations

from pipelines.core.positions import Position
from pipelines.systems.offsets import parse_offset

SYSTEM = "kafka"


def offset(position: Position) -> int:
    return parse_offset(SYSTEM, position)


def position_key(position: Position) -> int:
    """The order of this system's positions, without a client (offline tools, e.g. ``model migrate``)."""
    return offset(position)
