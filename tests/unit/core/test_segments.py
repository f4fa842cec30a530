"""Retention's rule: a prefix of whole files, all older than the time, never the last, never a reader's unread."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.segments import (
    RETAIN_FOREVER,
    Segment,
    compaction_runs,
    cutoff_ms,
    retention_cutoff,
    retention_ms,
    retention_text,
    trim_point,
    valid_retention,
)
from pipelines.core.start import start_time_ms, time_of_ms
from pipelines.errors import ConfigError


def _segments(sizes_and_times: list[tuple[int, int]]) -> list[Segment]:
    out, first = [], 0
    for size, newest in sizes_and_times:
        out.append(Segment(first, first + size - 1, newest))
        first += size
    return out


def test_old_files_go_from_the_front_and_the_last_file_stays_even_when_old() -> None:
    files = _segments([(5, 10), (5, 20), (5, 30)])
    assert trim_point(files, 15) == trim_point(files, 15, None)
    point = trim_point(files, 15)
    assert (point.files, point.earliest, point.records, point.stop) == (1, 5, 5, "newer")
    point = trim_point(files, 10_000)
    assert (point.files, point.earliest, point.records, point.stop) == (2, 10, 10, "last file")
    point = trim_point(files, 10)
    assert (point.files, point.earliest, point.records, point.stop) == (0, 0, 0, "newer"), "newest == time is kept"


def test_a_newer_file_stops_the_trim_even_if_older_files_follow_it() -> None:
    """Producers on several hosts stamp with their own clocks: a prefix only, so offsets stay dense."""
    point = trim_point(_segments([(3, 10), (3, 50), (3, 10), (3, 10)]), 40)
    assert (point.files, point.earliest, point.stop) == (1, 3, "newer")


def test_a_reader_holds_back_the_file_holding_its_first_unread_offset() -> None:
    files = _segments([(5, 10), (5, 20), (5, 30), (5, 40)])
    point = trim_point(files, 1_000, unread_from=7)
    assert (point.files, point.earliest, point.stop) == (1, 5, "unread")
    point = trim_point(files, 1_000, unread_from=10)
    assert (point.files, point.earliest, point.stop) == (2, 10, "unread"), "a file read to its end may go"
    point = trim_point(files, 1_000, unread_from=0)
    assert (point.files, point.earliest, point.stop) == (0, 0, "unread")


def test_a_partition_already_trimmed_counts_from_its_earliest_and_an_empty_one_has_nothing() -> None:
    files = [Segment(40, 49, 10), Segment(50, 59, 20)]
    point = trim_point(files, 15)
    assert (point.files, point.earliest, point.records) == (1, 50, 10)
    assert trim_point([], 15).stop == "empty" and trim_point([], 15).files == 0


@given(
    st.lists(st.tuples(st.integers(1, 20), st.integers(0, 100)), min_size=0, max_size=12),
    st.integers(0, 120),
    st.one_of(st.none(), st.integers(0, 250)),
)
def test_the_trim_is_the_longest_safe_prefix(files: list[tuple[int, int]], before: int, unread: int | None) -> None:
    segments = _segments(files)
    point = trim_point(segments, before, unread)
    gone, kept = segments[: point.files], segments[point.files :]
    assert len(kept) >= (1 if segments else 0), "the last file, which holds the end offset, always stays"
    assert all(s.newest_ms < before for s in gone), "only files whose every record is older than the time"
    assert unread is None or all(s.last < unread for s in gone), "nothing a reader has still to read"
    assert point.records == sum(s.last - s.first + 1 for s in gone)
    assert point.earliest == (kept[0].first if kept else 0)
    if len(kept) > 1:  # the first kept file breaks a rule: the prefix is as long as it may be
        nxt = kept[0]
        assert nxt.newest_ms >= before or (unread is not None and nxt.last >= unread)
    reasons = {"newer": kept[0].newest_ms >= before if kept else False, "unread": unread is not None}
    if point.stop in reasons:
        assert reasons[point.stop], point
    if point.stop == "last file":
        assert len(kept) == 1 and kept[0].newest_ms < before, "the last file is kept only for being the last"


@given(st.integers(0, 253_402_300_799_999))
def test_a_time_in_ms_and_its_canonical_form_are_one_to_one(ms: int) -> None:
    assert start_time_ms(time_of_ms(ms)) == ms


def _sized(specs: list[tuple[int, int, int]]) -> list[Segment]:
    """(size, oldest_ms, newest_ms) per file, ten offsets each."""
    return [Segment(10 * i, 10 * i + 9, newest, oldest, size) for i, (size, oldest, newest) in enumerate(specs)]


def test_small_files_merge_in_runs_bounded_by_size_and_time_span() -> None:
    files = _sized([(10, 0, 1), (10, 1, 2), (10, 2, 3), (10, 3, 4), (10, 4, 5)])
    assert compaction_runs(files, 30, 1_000) == [(0, 3), (3, 5)]
    assert compaction_runs(files, 1_000, 2) == [(0, 2), (2, 4)], "no run spans more than 2 ms"
    assert compaction_runs(files[:1], 1_000, 1_000) == [], "one file is no run"


def test_a_file_of_half_the_target_or_more_is_never_merged_again() -> None:
    files = _sized([(10, 0, 1), (50, 1, 2), (10, 2, 3), (10, 3, 4)])
    assert compaction_runs(files, 100, 1_000) == [(2, 4)]


@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(0, 50), st.integers(0, 50)), max_size=15),
    st.integers(1, 200),
    st.integers(0, 60),
)
def test_runs_are_disjoint_ordered_and_within_their_bounds(
    specs: list[tuple[int, int, int]], target: int, span: int
) -> None:
    files = _sized([(size, min(a, b), max(a, b)) for size, a, b in specs])
    runs = compaction_runs(files, target, span)
    assert all(b - a >= 2 for a, b in runs)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(runs)), "disjoint, in offset order"
    for a, b in runs:
        run = files[a:b]
        assert sum(f.size for f in run) <= target
        assert all(2 * f.size < target for f in run)
        assert max(f.newest_ms for f in run) - min(f.oldest_ms for f in run) <= span


def test_older_than_counts_back_from_now_and_never_before_1970() -> None:
    assert cutoff_ms(10_000, 2.5) == 7_500
    assert cutoff_ms(10_000, 86_400.0) == 0, "an age older than the epoch deletes nothing a record can be"


def test_a_streams_own_retention_is_an_age_forever_or_the_default_and_wins_over_the_schedules() -> None:
    assert retention_ms("7d") == 7 * 86_400_000 and retention_text(7 * 86_400_000) == "7d"
    assert retention_ms(" 12H ") == 43_200_000 and retention_text(43_200_000) == "12h"
    assert retention_ms("forever") == RETAIN_FOREVER and retention_text(RETAIN_FOREVER) == "forever"
    assert retention_ms("default") is None and retention_text(None) == "default"
    assert retention_text(90 * 60_000) == "90m" and retention_text(1500) == "1500ms"
    for bad, reason in (
        ("", "an age such as"),
        ("-1", "an age such as"),  # Kafka's -1 is spelled 'forever' here
        ("soon", "an age such as"),
        ("0", "must be positive"),
        ("0.0001s", "at least 1ms"),
        ("9999999999999d", "shorter than"),
    ):
        with pytest.raises(ConfigError, match=reason):
            retention_ms(bad)
    for stored in (0, -2, 1.5, True, "7d"):
        with pytest.raises(ConfigError):
            valid_retention(stored)
    assert retention_cutoff(100_000, 40_000, 10.0) == 60_000, "the stream's own, not the schedule's"
    assert retention_cutoff(100_000, None, 10.0) == 90_000, "the schedule's when the stream has none"
    assert retention_cutoff(100_000, RETAIN_FOREVER, 10.0) is None
    assert retention_cutoff(100_000, None, None) is None


@given(st.integers(1, 10 * 365 * 86_400_000))
def test_a_retention_and_its_text_are_one_to_one(ms: int) -> None:
    assert retention_ms(retention_text(ms)) == ms
