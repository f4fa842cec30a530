"""The SVG plots: markers where their time is, series drawn from their points, ticks that fit."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from pipelines.observe.series import Chart, Marker, Series
from pipelines.observe.svg import WIDTH, nice_max, plot, segments, thin, time_axis


def mark(at: float, until: float | None = None, kind: str = "rescale", event_id: str = "e") -> Marker:
    return Marker(at, until, kind, f"{kind} ×1→×4 · down 2.0 s", event_id, "verified", 1, 4, {}, 2.0, "in-place")


def chart(points: tuple[tuple[float, float], ...]) -> Chart:
    return Chart("throughput", "Throughput", "records/s", (Series("in", points),))


def test_markers_sit_at_their_time_on_the_shared_axis() -> None:
    c = chart(((100.0, 10.0), (200.0, 30.0), (300.0, 20.0)))
    markers = [mark(150.0, 160.0, event_id="a"), mark(250.0, kind="expansion", event_id="b")]
    axis = time_axis([c], markers)
    assert (axis.t0, axis.t1) == (100.0, 300.0)
    svg = plot(c, markers, axis)
    found = dict(re.findall(r"<g class='marker' data-kind='\w+' data-event='(\w)' data-x='([\d.]+)'", svg))
    left, right = axis.left, axis.right
    assert float(found["a"]) == round(left + (right - left) * 0.25, 1)
    assert float(found["b"]) == round(left + (right - left) * 0.75, 1)
    assert svg.count("rescale ×1→×4 · down 2.0 s") == 2  # the label and the tooltip
    assert "data-kind='expansion'" in svg and "data-downtime='2.000'" in svg


def test_a_series_is_a_polyline_through_its_points() -> None:
    c = chart(((100.0, 0.0), (200.0, 50.0), (300.0, 100.0)))
    axis = time_axis([c], [])
    svg = plot(c, [], axis)
    (points,) = re.findall(r"<polyline [^>]*points='([^']+)'", svg)
    coords = [tuple(map(float, p.split(","))) for p in points.split()]
    assert [x for x, _ in coords] == [axis.left, (axis.left + axis.right) / 2, axis.right]
    ys = [y for _, y in coords]
    assert ys[0] > ys[1] > ys[2]  # larger values higher up
    assert "data-points='3'" in svg and svg.startswith("<svg") and svg.endswith("</svg>")


def test_a_chart_without_points_says_why() -> None:
    c = Chart("lag", "Lag", "records", (), "unknown: no input could count the records behind")
    svg = plot(c, [mark(10.0)], time_axis([c], [mark(10.0)]))
    assert "unknown: no input could count" in svg and "<polyline" not in svg and "class='marker'" in svg


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
    svg = plot(chart(((1.0, 1.0),)), [], time_axis([chart(((1.0, 1.0),))], []))
    assert f"width='{WIDTH}'" in svg


def test_a_pause_breaks_the_line_instead_of_drawing_a_ramp() -> None:
    points = tuple((float(t), 1.0) for t in (0, 1, 2, 3, 60, 61, 62))
    c = chart(points)
    svg = plot(c, [], time_axis([c], []))
    assert svg.count("<polyline") == 2 and "data-points='7'" in svg
    assert [len(s) for s in segments(points)] == [4, 3]
    assert segments(points[:2]) == [list(points[:2])] and segments(()) == []
