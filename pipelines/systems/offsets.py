"""Positions of the offset systems (the embedded log, Kafka): a decimal "next offset to read"."""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.core.positions import Position
from pipelines.errors import StreamError


def parse_offset(system: str, position: Position) -> int:
    """A position of an offset system as the offset it is; anything else is somebody else's position."""
    try:
        value = int(position)
    except (TypeError, ValueError):
        raise StreamError(f"{system} positions are decimal offsets, got {position!r}") from None
    if value < 0:
        raise StreamError(f"{system} positions are offsets >= 0, got {position!r}")
    return value


class OffsetOrder:
    """The order of an offset system's positions, as the protocol asks it; mixed into ``DeltaLog`` and Kafka."""

    system: str

    def position_key(self, position: Position) -> int:
        return parse_offset(self.system, position)

    def reached(self, stream: str, partition: int, position: Position, target: Position) -> bool:
        return parse_offset(self.system, position) >= parse_offset(self.system, target)

    def unread(self, stream: str, partition: int, records: Sequence[Position], position: Position) -> list[bool]:
        at = parse_offset(self.system, position)
        return [parse_offset(self.system, r) >= at for r in records]
