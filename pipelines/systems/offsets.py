"""Positions of the offset systems (the embedded log, Kafka): a decimal "next offset to read"."""

from __future__ import annotations

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
