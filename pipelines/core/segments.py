"""A partition's files as a Kafka broker's segments: which ones retention removes, and which runs compaction merges.

A partition of the embedded log is a run of files in offset order, one per
producer commit, much as a Kafka partition is a run of segments. Retention
removes whole files from the front, never from the middle (offsets stay
dense from the new earliest), never the last one (it holds the end offset
the next producer numbers from, like Kafka's active segment) and, unless the
operator says otherwise, never a record a reader has not read yet.
Compaction merges runs of consecutive small files into one, bounded in size
and in the time its records span (Kafka's ``segment.bytes`` and
``segment.ms``), so that retention, which removes whole files, stays as fine
as the span. See docs/systems/deltalog.md, "Retention" and "Compaction".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pipelines.core.durations import DURATION_PATTERN, parse_duration
from pipelines.errors import ConfigError

COMPACT_TARGET_BYTES = 128 * 1024 * 1024
"""A merged file's size at most, by default: a tenth of Kafka's ``segment.bytes`` (1 GiB), for a stream read in
micro-batches of thousands of records rather than whole segments."""
COMPACT_SPAN_MS = 3_600_000
"""A merged file's record time at most, by default (Kafka's ``segment.ms`` is a week): an hour keeps a 7-day
retention within 1/168 of its age, since retention deletes whole files."""

Stop = Literal["newer", "last file", "unread", "empty"]
"""Why a partition keeps the file it stops at: it holds a record at or after the time, it is the partition's last,
a reader has not read all of it, or there are no files at all."""


@dataclass(frozen=True)
class Segment:
    """One file of a partition: its offsets ``[first, last]``, its records' times (ms since the epoch), its size."""

    first: int
    last: int
    newest_ms: int
    oldest_ms: int = 0
    size: int = 0


@dataclass(frozen=True)
class TrimPoint:
    """What retention removes from one partition: its first ``files`` segments, so it then starts at ``earliest``."""

    files: int
    earliest: int
    records: int
    stop: Stop


RETAIN_FOREVER = -1
"""A stream's own retention that keeps every record, Kafka's ``retention.ms=-1``."""

_UNITS_MS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


def retention_ms(value: object) -> int | None:
    """A stream's own retention from an operator's word: an age (``30m``, ``12h``, ``7d``) in ms, ``forever``
    (:data:`RETAIN_FOREVER`), or ``default`` (``None``: the schedule's ``older_than`` applies, as a topic without
    ``retention.ms`` gets the broker's ``log.retention.hours``)."""
    word = str(value).strip().lower()
    if word == "forever":
        return RETAIN_FOREVER
    if word == "default":
        return None
    if not re.match(DURATION_PATTERN, word):
        raise ConfigError(f"retention must be an age such as '12h' or '7d', 'forever' or 'default', got {value!r}")
    ms = round(parse_duration(word, "retention").total_seconds() * 1000)
    if ms < 1:
        raise ConfigError(f"retention must be at least 1ms, got {value!r}")
    return ms


def retention_text(ms: int | None) -> str:
    """How ``describe`` shows a stream's own retention: the largest whole unit (``7d``, ``90m``), or the word."""
    if ms is None:
        return "default"
    if ms == RETAIN_FOREVER:
        return "forever"
    if ms <= 0:  # not ours to set, but a broker's topic may say so
        return f"{ms}ms"
    for unit, size in _UNITS_MS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def valid_retention(ms: object) -> int | None:
    """A retention as the stream's metadata stores it (ms > 0, -1, or absent), else ``ConfigError``."""
    if ms is None or (isinstance(ms, int) and not isinstance(ms, bool) and (ms > 0 or ms == RETAIN_FOREVER)):
        return ms
    raise ConfigError(f"retention_ms must be a whole number of ms > 0 or {RETAIN_FOREVER}, got {ms!r}")


def retention_cutoff(now_ms: int, own_ms: int | None, default_s: float | None) -> int | None:
    """The time before which a stream's files may go on a schedule: the stream's own retention, else the default
    age; ``None`` when the stream keeps everything (its own ``forever``, or no default)."""
    if own_ms == RETAIN_FOREVER:
        return None
    if own_ms is not None:
        return cutoff_ms(now_ms, own_ms / 1000)
    return None if default_s is None else cutoff_ms(now_ms, default_s)


def cutoff_ms(now_ms: int, age_s: float) -> int:
    """``--older-than AGE``'s time: ``now - AGE``, never before 1970 (no record is older than that)."""
    return max(0, now_ms - int(age_s * 1000))


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


def compaction_runs(segments: Sequence[Segment], target_bytes: int, max_span_ms: int) -> list[tuple[int, int]]:
    """Runs ``[i, j)`` of at least two consecutive segments to merge, each at most ``target_bytes`` in all and
    spanning at most ``max_span_ms`` from its oldest record to its newest, greedy from the front.

    A segment of half the target or more is never merged again: without that, a merged file would be rewritten
    by every later compaction that adds a few new files to it, and the bytes written would grow with the square
    of the stream's size instead of staying within twice it.
    """
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(segments):
        j, size = i, 0
        oldest = newest = segments[i].oldest_ms
        while j < len(segments):
            s = segments[j]
            lo, hi = min(oldest, s.oldest_ms), max(newest, s.newest_ms)
            if 2 * s.size >= target_bytes or size + s.size > target_bytes or hi - lo > max_span_ms:
                break
            size, oldest, newest = size + s.size, lo, hi
            j += 1
        if j - i >= 2:
            runs.append((i, j))
        i = max(j, i + 1)
    return runs
