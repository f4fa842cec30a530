"""Time-series plots as inline SVG, drawn on the server in plain Python.

No charting library and no JavaScript: the machines that run Airflow may
have no internet (no CDN), the page must load fast, and the same markup goes
into the CLI's HTML export. Every plot of one job shares one time axis
(``TimeAxis``), so a marker sits at the same x in all of them.

Markers (scaling steps) are drawn as a dashed line at the step's start, a
light band to its end, and a label with the factor step (or new partition
counts) and the downtime; the full details are in the marker's ``<title>``
(the browser's tooltip). Each marker's ``<g>`` carries ``data-kind``,
``data-event`` and ``data-x`` so tests (and people reading the markup) can
find it.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pipelines.observe.series import Chart, Marker

WIDTH = 560
HEIGHT = 210
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 34, 26
MAX_POINTS = 600
"""A series with more points is averaged into this many buckets: the plot is at most this many pixels wide."""
COLORS = ("#2563eb", "#d97706", "#059669", "#7c3aed")
MARKER_COLORS = {"rescale": "#dc2626", "expansion": "#0891b2", "reshard": "#9333ea", "outage": "#d97706"}
LABEL_ROWS = 3
GAP = 5.0


@dataclass(frozen=True)
class TimeAxis:
    """Epoch seconds ``t0..t1`` onto x pixels ``left..right``."""

    t0: float
    t1: float
    left: float = LEFT
    right: float = WIDTH - RIGHT

    def x(self, t: float) -> float:
        span = self.t1 - self.t0
        return self.left + (t - self.t0) / span * (self.right - self.left)

    def clamp(self, x: float) -> float:
        return min(max(x, self.left), self.right)


def time_axis(charts: Iterable[Chart], markers: Iterable[Marker], width: int = WIDTH) -> TimeAxis:
    """The span of every point and every marker's start, padded when it is a single instant."""
    times = [t for c in charts for s in c.series for t, _ in s.points]
    times += [m.at for m in markers]
    if not times:
        return TimeAxis(0.0, 1.0, LEFT, width - RIGHT)
    t0, t1 = min(times), max(times)
    if t1 - t0 < 1.0:
        t0, t1 = t0 - 30.0, t1 + 30.0
    return TimeAxis(t0, t1, LEFT, width - RIGHT)


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= value (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** _floor_log10(value)
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10.0 * power


def _floor_log10(value: float) -> int:
    exponent = 0
    while value >= 10:
        value /= 10
        exponent += 1
    while value < 1:
        value *= 10
        exponent -= 1
    return exponent


def compact(value: float) -> str:
    """1234 -> 1.2k, 0.25 -> 0.25: tick labels that fit."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def thin(points: Sequence[tuple[float, float]], limit: int = MAX_POINTS) -> list[tuple[float, float]]:
    """At most ``limit`` points: consecutive points averaged in equal groups (times and values alike)."""
    if len(points) <= limit:
        return list(points)
    size = -(-len(points) // limit)
    result = []
    for i in range(0, len(points), size):
        group = points[i : i + size]
        result.append((sum(t for t, _ in group) / len(group), sum(v for _, v in group) / len(group)))
    return result


def segments(points: Sequence[tuple[float, float]], gap: float = GAP) -> list[list[tuple[float, float]]]:
    """Runs of points without a pause: a line is broken where the time to the next point exceeds ``gap`` times
    the median step, so a stopped job (or a cold rescale's pause) shows as a gap, not as a ramp."""
    if len(points) < 3:
        return [list(points)] if points else []
    steps = sorted(b[0] - a[0] for a, b in itertools.pairwise(points))
    limit = gap * steps[len(steps) // 2]
    result = [[points[0]]]
    for previous, point in itertools.pairwise(points):
        if limit > 0 and point[0] - previous[0] > limit:
            result.append([])
        result[-1].append(point)
    return result


def _clock(t: float, span: float) -> str:
    moment = datetime.fromtimestamp(t, UTC)
    return moment.strftime("%m-%d %H:%M" if span > 86_400 else "%H:%M:%S")


def plot(chart: Chart, markers: Sequence[Marker], axis: TimeAxis, *, width: int = WIDTH, height: int = HEIGHT) -> str:
    """One chart as an ``<svg>`` element, its markers on it."""
    e = html.escape
    bottom = height - BOTTOM
    values = [v for s in chart.series for _, v in s.points]
    top_value = nice_max(max(values, default=0.0))

    def y(v: float) -> float:
        return bottom - v / top_value * (bottom - TOP)

    out = [
        f"<svg class='obs-plot' data-chart='{e(chart.key)}' xmlns='http://www.w3.org/2000/svg' "
        f"width='{width}' height='{height}' viewBox='0 0 {width} {height}' role='img' "
        f"aria-label='{e(chart.title)} ({e(chart.unit)})' font-family='Helvetica, Arial, sans-serif' font-size='11'>",
        f"<rect x='0' y='0' width='{width}' height='{height}' fill='#ffffff'/>",
        f"<text x='{LEFT}' y='14' font-size='13' font-weight='600' fill='#1f2933'>{e(chart.title)}"
        f"<tspan fill='#7b8794' font-weight='400'> {e(chart.unit)}</tspan></text>",
    ]
    for i in range(3):  # y grid: 0, half, top
        v = top_value * i / 2
        yy = y(v)
        out.append(
            f"<line x1='{axis.left:.1f}' x2='{axis.right:.1f}' y1='{yy:.1f}' y2='{yy:.1f}' stroke='#e4e7eb'/>"
            f"<text x='{axis.left - 4:.1f}' y='{yy + 4:.1f}' text-anchor='end' fill='#616e7c'>{compact(v)}</text>"
        )
    span = axis.t1 - axis.t0
    for i in range(5):  # x ticks
        t = axis.t0 + span * i / 4
        xx = axis.x(t)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(
            f"<line x1='{xx:.1f}' x2='{xx:.1f}' y1='{bottom}' y2='{bottom + 4}' stroke='#9aa5b1'/>"
            f"<text x='{xx:.1f}' y='{bottom + 16}' text-anchor='{anchor}' fill='#616e7c'>{_clock(t, span)}</text>"
        )
    out.append(f"<line x1='{axis.left:.1f}' x2='{axis.right:.1f}' y1='{bottom}' y2='{bottom}' stroke='#9aa5b1'/>")
    for i, m in enumerate(markers):
        out.append(_marker(m, axis, i, bottom))
    legend_x = axis.right
    for i, s in reversed(list(enumerate(chart.series))):  # legend, right-aligned on the title's line
        color = COLORS[i % len(COLORS)]
        out.append(
            f"<text class='legend' x='{legend_x:.1f}' y='14' text-anchor='end' fill='{color}'>■ {e(s.name)}</text>"
        )
        legend_x -= 12 + 7 * (len(s.name) + 2)
    for i, s in enumerate(chart.series):
        color = COLORS[i % len(COLORS)]
        points = thin(s.points)
        out.append(f"<g class='series' data-series='{e(s.name)}' data-points='{len(s.points)}'>")
        for segment in segments(points):
            if len(segment) > 1:
                coords = " ".join(f"{axis.x(t):.1f},{y(v):.1f}" for t, v in segment)
                out.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.6' points='{coords}'/>")
        if len(points) <= 60:
            out += [f"<circle cx='{axis.x(t):.1f}' cy='{y(v):.1f}' r='2.2' fill='{color}'/>" for t, v in points]
        out.append("</g>")
    if not values:
        note = chart.note or "no batches in this window"
        out.append(
            f"<text class='note' x='{(axis.left + axis.right) / 2:.1f}' y='{(TOP + bottom) / 2:.1f}' "
            f"text-anchor='middle' fill='#7b8794'>{e(_shorten(note, 90))}<title>{e(note)}</title></text>"
        )
    out.append("</svg>")
    return "".join(out)


def _marker(m: Marker, axis: TimeAxis, index: int, bottom: float) -> str:
    e = html.escape
    color = MARKER_COLORS.get(m.kind, "#52606d")
    x = axis.clamp(axis.x(m.at))
    end = axis.clamp(axis.x(m.until)) if m.until is not None else axis.right
    label_y = TOP + 10 + (index % LABEL_ROWS) * 12
    anchor, label_x = ("end", x - 3) if x > (axis.left + axis.right) / 2 else ("start", x + 3)
    details = [m.label, f"event {m.event_id}", f"status {m.status}"]
    if m.mode:
        details.append(f"mode {m.mode}")
    return (
        f"<g class='marker' data-kind='{e(m.kind)}' data-event='{e(m.event_id)}' data-x='{x:.1f}' "
        f"data-factor='{e(_dash(m.from_factor))}→{e(_dash(m.to_factor))}' "
        f"data-downtime='{e('' if m.downtime_s is None else f'{m.downtime_s:.3f}')}'>"
        f"<title>{e(' · '.join(details))}</title>"
        f"<rect x='{x:.1f}' y='{TOP}' width='{max(end - x, 0.0):.1f}' height='{bottom - TOP:.1f}' "
        f"fill='{color}' fill-opacity='0.07'/>"
        f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{TOP - 4}' y2='{bottom}' stroke='{color}' stroke-width='1.4' "
        f"stroke-dasharray='4 3'/>"
        f"<text class='marker-label' x='{label_x:.1f}' y='{label_y}' text-anchor='{anchor}' fill='{color}' "
        f"font-weight='600'>{e(m.label)}</text></g>"
    )


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dash(value: object) -> str:
    return "" if value is None else str(value)
