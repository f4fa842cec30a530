"""The plots' layout: markers where their time is, idle time cut out, hidden series shown, labels kept apart."""

from __future__ import annotations

import itertools
import re

from hypothesis import given
from hypothesis import strategies as st

from pipelines.observe.render import plot
from pipelines.observe.series import Chart, Marker, Series
from pipelines.observe.svg import (
    BADGE_PX,
    CHAR_PX,
    MAX_STRIPS,
    WIDTH,
    badge_rows,
    layout,
    nice_max,
    segments,
    thin,
    ticks,
    time_axis,
)


def mark(at: float, until: float | None = None, kind: str = "rescale", event_id: str = "e") -> Marker:
    return Marker(at, until, kind, f"{kind} ×1→×4 · down 2.0 s", event_id, "verified", 1, 4, {}, 2.0, "in-place")


def chart(*series: tuple[tuple[float, float], ...], names: tuple[str, ...] = ("in", "out")) -> Chart:
    named = tuple(Series(n, s) for n, s in zip(names, series, strict=False))
    return Chart("throughput", "Throughput", "records/s", named)


def burst(start: float, seconds: int, value: float = 10.0, every: float = 2.0) -> tuple[tuple[float, float], ...]:
    return tuple((start + i * every, value + i % 3) for i in range(int(seconds / every)))


def test_markers_sit_at_their_time_on_the_shared_axis() -> None:
    c = chart(((100.0, 10.0), (200.0, 30.0), (300.0, 20.0)))
    markers = [mark(150.0, 160.0, event_id="a"), mark(250.0, kind="expansion", event_id="b")]
    axis = time_axis([c], markers)
    assert (axis.t0, axis.t1, len(axis.pieces)) == (100.0, 300.0, 1)
    found = {m.marker.event_id: m for m in layout(c, markers, axis).markers}
    left, right = axis.left, axis.right
    assert found["a"].x == left + (right - left) * 0.25 and found["b"].x == left + (right - left) * 0.75
    assert (found["a"].number, found["b"].number) == (1, 2)
    svg = plot(c, markers, axis)
    assert svg.count("rescale ×1→×4 · down 2.0 s") == 1  # in the tooltip; the plot shows the number
    assert 'data-kind="expansion"' in svg and 'data-downtime="2.000"' in svg and 'data-factor="1→4"' in svg


def test_two_bursts_minutes_apart_share_the_width_and_the_idle_time_is_a_marked_break() -> None:
    c = chart(burst(0.0, 60) + burst(480.0, 60))
    axis = time_axis([c], [])
    assert len(axis.pieces) == 2
    (cut,) = axis.breaks
    assert cut.label == "+7 min" and cut.x1 - cut.x0 < 30
    for piece in axis.pieces:  # each burst gets nearly half the width, not a 40-pixel sliver
        assert piece.x1 - piece.x0 > 0.45 * (axis.right - axis.left)
    svg = plot(c, [], axis)
    assert svg.count('class="cut"') == 1 and ">+7 min<" in svg
    assert svg.count('<polyline fill="none" stroke="#2563eb"') == 2  # the line breaks at the cut


def test_a_steady_job_with_a_short_pause_keeps_a_linear_axis_and_breaks_only_the_line() -> None:
    points = tuple((float(t), 1.0) for t in list(range(0, 600, 2)) + list(range(640, 1200, 2)))
    c = chart(points)
    axis = time_axis([c], [])
    assert len(axis.pieces) == 1
    svg = plot(c, [], axis)
    assert svg.count("<polyline") == 2 and 'data-points="580"' in svg


def test_a_series_equal_to_another_is_dashed_and_named_equal_in_the_legend() -> None:
    same = burst(0.0, 40)
    p = layout(chart(same, same), [], time_axis([chart(same)], []))
    first, second = p.series
    assert not first.dashed and second.dashed and second.equal_to == "in"
    assert [item.text for item in p.legend] == ["in", "out = in"]
    half = tuple((t, v if i < 10 else v + 50) for i, (t, v) in enumerate(same))
    partly = layout(chart(same, half), [], time_axis([chart(same)], [])).series[1]
    assert partly.dashed and partly.equal_to is None  # half hidden: dashed, not called equal
    touching = tuple((t, v if i < 2 else v + 50) for i, (t, v) in enumerate(same))
    assert not layout(chart(same, touching), [], time_axis([chart(same)], [])).series[1].dashed  # 2 of 20 points
    apart = layout(chart(same, tuple((t, v + 50) for t, v in same)), [], time_axis([chart(same)], []))
    assert not apart.series[1].dashed


def test_every_point_has_a_tooltip() -> None:
    few = chart(burst(0.0, 40))
    p = layout(few, [], time_axis([few], []))
    assert len(p.series[0].dots) == 20 and all("records/s" in d.title for d in p.series[0].dots)
    many = chart(burst(0.0, 2000, every=1.0))
    axis = time_axis([many], [])
    dense = layout(many, [], axis)
    assert dense.series[0].dots == () and 0 < len(dense.strips) <= MAX_STRIPS
    assert dense.strips[0].x0 == axis.left and dense.strips[-1].x1 == axis.right
    assert all(a.x1 == b.x0 for a, b in itertools.pairwise(dense.strips))  # every x is in one strip
    assert "in " in dense.strips[0].title and "batches" in dense.strips[0].title


@given(st.lists(st.floats(min_value=0, max_value=3600), min_size=1, max_size=40))
def test_marker_badges_in_one_row_never_overlap(times: list[float]) -> None:
    c = chart(burst(0.0, 3600, every=30.0))
    markers = [mark(t, event_id=str(i)) for i, t in enumerate(times)]
    placed = layout(c, markers, time_axis([c], markers)).markers
    for a in placed:
        for b in placed:
            if a is not b and a.row == b.row:
                assert abs(a.x - b.x) >= BADGE_PX
    assert badge_rows([10.0, 10.0, 10.0, 40.0]) == [0, 1, 2, 0]


@given(st.lists(st.floats(min_value=0, max_value=86_000), min_size=2, max_size=60, unique=True))
def test_tick_labels_never_overlap(times: list[float]) -> None:
    c = chart(tuple((t, 1.0) for t in sorted(times)))
    axis = time_axis([c], [])
    placed = ticks(axis)
    spans = []
    for t in placed:
        w = len(t.label) * CHAR_PX
        lo = t.x if t.anchor == "start" else t.x - w if t.anchor == "end" else t.x - w / 2
        spans.append((lo, lo + w))
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))
    assert all(axis.left - 1e-6 <= lo and hi <= axis.right + 1e-6 for lo, hi in spans)


def test_a_chart_without_points_says_why() -> None:
    c = Chart("lag", "Lag", "records", (), "unknown: no input could count the records behind")
    svg = plot(c, [mark(10.0)], time_axis([c], [mark(10.0)]))
    assert "unknown: no input could count" in svg and "<polyline" not in svg and 'class="marker"' in svg


def test_text_is_escaped() -> None:
    c = Chart("x", "<b>", "&", (Series("<i>", ((1.0, 1.0), (2.0, 2.0))),))
    svg = plot(c, [], time_axis([c], []))
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "&lt;i&gt;" in svg


@given(st.floats(min_value=1e-6, max_value=1e12, allow_nan=False))
def test_the_y_axis_top_covers_the_largest_value_without_wasting_more_than_half(value: float) -> None:
    top = nice_max(value)
    assert value <= top * (1 + 1e-9) and top <= 2.0 * value * (1 + 1e-9)


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=0, max_size=3000), st.integers(1, 700))
def test_thinning_keeps_at_most_the_limit_and_the_time_order(values: list[float], limit: int) -> None:
    points = [(float(i), v) for i, v in enumerate(values)]
    thinned = thin(points, limit)
    assert len(thinned) <= max(limit, 0) or len(points) <= limit
    assert [t for t, _ in thinned] == sorted(t for t, _ in thinned)
    if points:
        assert min(v for _, v in points) - 1e-6 <= min(v for _, v in thinned)
        assert max(v for _, v in thinned) <= max(v for _, v in points) + 1e-6


def test_the_plot_has_the_requested_size() -> None:
    c = chart(((1.0, 1.0),))
    assert f'width="{WIDTH}"' in plot(c, [], time_axis([c], []))


def test_a_pause_breaks_the_line_instead_of_drawing_a_ramp() -> None:
    points = tuple((float(t), 1.0) for t in (0, 1, 2, 3, 60, 61, 62))
    assert [len(s) for s in segments(points)] == [4, 3]
    assert segments(points[:2]) == [list(points[:2])] and segments(()) == []
    svg = plot(chart(points), [], time_axis([chart(points)], []))
    assert len(re.findall('<polyline fill="none" stroke="#2563eb"', svg)) == 2 and 'data-points="7"' in svg
