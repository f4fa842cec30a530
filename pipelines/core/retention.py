"""How far retention may move a partition's start: the rule behind ``pipelines stream trim``.

A partition of the embedded log is a run of files in offset order, one per
producer commit, much as a Kafka partition is a run of segments. Retention
removes whole files from the front, never from the middle (offsets stay
dense from the new earliest), never the last one (it holds the end offset
the next producer numbers from, like Kafka's active segment) and, unless the
operator says otherwise, never a record a reader has not read yet. See
docs/systems/deltalog.md, "Retention".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Stop = Literal["newer", "last file", "unread", "empty"]
"""Why a partition keeps the file it stops at: it holds a record at or after the time, it is the partition's last,
a reader has not read all of it, or there are no files at all."""


@dataclass(frozen=True)
class Segment:
    """One file of a partition: its offsets ``[first, last]`` and its newest record's time (ms since the epoch)."""

    first: int
    last: int
    newest_ms: int


@dataclass(frozen=True)
class TrimPoint:
    """What retention removes from one partition: its first ``files`` segments, so it then starts at ``earliest``."""

    files: int
    earliest: int
    records: int
    stop: Stop


def trim_point(segments: Sequence[Segment], before_ms: int, unread_from: int | None = None) -> TrimPoint:
    """The longest prefix of ``segments`` (in offset order) whose every record is older than ``before_ms``, short of
    the last segment and of the segment holding ``unread_from`` (the first offset some reader still has to read;
    ``None``: no reader holds it back)."""
    if not segments:
        return TrimPoint(0, 0, 0, "empty")
    removed = 0
    stop: Stop = "last file" if segments[-1].newest_ms < before_ms else "newer"
    for segment in segments[:-1]:
        if segment.newest_ms >= before_ms:
            stop = "newer"
            break
        if unread_from is not None and segment.last >= unread_from:
            stop = "unread"
            break
        removed += 1
    earliest = segments[removed].first
    return TrimPoint(removed, earliest, earliest - segments[0].first, stop)
