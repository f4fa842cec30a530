"""Where everything of a time-series plot goes: pure layout, drawn as inline SVG by ``templates/observe/plot.svg``.

No charting library and no JavaScript: the machines that run Airflow may have
no internet (no CDN), the page must load fast, and the same markup goes into
the CLI's HTML export. Numbers in, a ``PlotLayout`` out (unit-tested); the
template writes the SVG. What keeps a plot readable when the job was not steady:

* **Idle time is cut out of the axis** (``time_axis``), or two bursts eight
  minutes apart are slivers: an idle stretch longer than ``CUT_FRACTION`` of
  the window (and ``GAP`` usual steps) becomes a hatched break labelled with
  the time it stands for ("+8 min"). Every plot of a job shares one axis.
* **A series hidden under another is still seen**: one lying on an earlier
  one is dashed, and the legend says "out = in" when they are equal all along.
* **Marker labels never collide**: numbered badges closer than ``BADGE_PX``
  are stacked in rows; the page lists the numbers with their full labels.
* **Every point has a tooltip**: few points are drawn as dots with a
  ``<title>``; denser plots get invisible strips (at most ``MAX_STRIPS``).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
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
GAP = 5.0
"""A line breaks where the time to the next point exceeds this many times the median step."""
CUT_FRACTION = 0.08
"""Idle stretches longer than this share of the window (and than a line break) are cut out of the axis."""
BREAK_PX = 22.0
MIN_PIECE_PX = 24.0
BADGE_PX = 16.0
DRAWN_POINTS = 60
"""Up to this many points per series are drawn as dots with their own tooltip; more get tooltip strips."""
MAX_STRIPS = 80
CHAR_PX = 6.2  # the width of a character of the 11 px tick font, to keep tick labels apart
OVERLAP = 0.005
"""Two series overlap where they differ by less than this share of the plot's top value."""
HIDDEN = 0.25
"""A series lying on an earlier one for at least this share of its points is drawn dashed."""


# ---------------------------------------------------------------------------------------------------- the time axis


@dataclass(frozen=True)
class Piece:
    """A stretch of time drawn linearly: epoch seconds ``t0..t1`` onto x pixels ``x0..x1``."""

    t0: float
    t1: float
    x0: float
    x1: float

    def x(self, t: float) -> float:
        if self.t1 <= self.t0:
            return (self.x0 + self.x1) / 2
        return self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)


@dataclass(frozen=True)
class Break:
    """An idle stretch cut out of the axis: drawn from ``x0`` to ``x1``, standing for ``seconds``."""

    x0: float
    x1: float
    seconds: float

    @property
    def label(self) -> str:
        return "+" + duration(self.seconds)


@dataclass(frozen=True)
class TimeAxis:
    """Epoch seconds onto x pixels, piece by piece; times inside a cut stretch fall in its break."""

    pieces: tuple[Piece, ...]
    left: float = LEFT
    right: float = WIDTH - RIGHT

    @property
    def t0(self) -> float:
        return self.pieces[0].t0

    @property
    def t1(self) -> float:
        return self.pieces[-1].t1

    @property
    def span(self) -> float:
        return self.t1 - self.t0

    @property
    def breaks(self) -> list[Break]:
        return [Break(a.x1, b.x0, b.t0 - a.t1) for a, b in itertools.pairwise(self.pieces)]

    def x(self, t: float) -> float:
        starts = [p.t0 for p in self.pieces]
        i = bisect.bisect_right(starts, t) - 1
        if i < 0:
            return self.left
        piece = self.pieces[i]
        if t <= piece.t1:
            return piece.x(t)
        if i + 1 < len(self.pieces):  # inside a break: spread over the break's width
            after = self.pieces[i + 1]
            share = (t - piece.t1) / (after.t0 - piece.t1)
            return piece.x1 + share * (after.x0 - piece.x1)
        return self.right

    def piece_of(self, t: float) -> int:
        """The index of the piece holding ``t`` (a time in a break belongs to the piece before it)."""
        return max(0, bisect.bisect_right([p.t0 for p in self.pieces], t) - 1)

    def clamp(self, x: float) -> float:
        return min(max(x, self.left), self.right)


def time_axis(charts: Iterable[Chart], markers: Iterable[Marker], width: int = WIDTH) -> TimeAxis:
    """One axis for every plot of a job: the times of its points and markers, idle stretches cut out."""
    points = sorted({t for c in charts for s in c.series for t, _ in s.points})
    marks = list(markers)
    times = sorted(set(points) | {m.at for m in marks} | {m.until for m in marks if m.until is not None})
    left, right = float(LEFT), float(width - RIGHT)
    if not times:
        return TimeAxis((Piece(0.0, 1.0, left, right),), left, right)
    if times[-1] - times[0] < 1.0:
        return TimeAxis((Piece(times[0] - 30.0, times[-1] + 30.0, left, right),), left, right)
    span = times[-1] - times[0]
    steps = [b - a for a, b in itertools.pairwise(points) if b > a]
    usual = statistics.median(steps) if steps else 0.0
    cut = max(CUT_FRACTION * span, GAP * usual)
    stretches: list[list[float]] = [[times[0], times[0]]]
    for t in times[1:]:
        if t - stretches[-1][1] > cut:
            stretches.append([t, t])
        else:
            stretches[-1][1] = t
    return _spread(stretches, left, right)


def _spread(stretches: list[list[float]], left: float, right: float) -> TimeAxis:
    """Pieces for the stretches: each at least ``MIN_PIECE_PX`` wide, the rest of the width by duration."""
    room = right - left - BREAK_PX * (len(stretches) - 1)
    while len(stretches) > 1 and room < MIN_PIECE_PX * len(stretches):  # too many breaks: merge the closest
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(stretches)]
        i = gaps.index(min(gaps))
        stretches[i : i + 2] = [[stretches[i][0], stretches[i + 1][1]]]
        room = right - left - BREAK_PX * (len(stretches) - 1)
    total = sum(b - a for a, b in stretches)
    spare = room - MIN_PIECE_PX * len(stretches)
    pieces = []
    x = left
    for a, b in stretches:
        share = (b - a) / total if total > 0 else 1.0 / len(stretches)
        w = MIN_PIECE_PX + spare * share
        t0, t1 = (a, b) if b > a else (a - 1.0, b + 1.0)  # an instant gets a little room around it
        pieces.append(Piece(t0, t1, x, x + w))
        x += w + BREAK_PX
    return TimeAxis(tuple(pieces), left, right)


@dataclass(frozen=True)
class Tick:
    x: float
    label: str
    anchor: str  # "start", "middle" or "end"


NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def ticks(axis: TimeAxis) -> list[Tick]:
    """Labelled ticks: every piece's start first (a cut's far side needs its time most), the axis's end, then
    round times inside wide pieces; a label that would overlap one already placed is left out."""
    long_span = axis.span > 86_400
    candidates: list[tuple[float, str | None]] = [(p.t0, "start") for p in axis.pieces]
    candidates.append((axis.t1, "end"))
    for piece in axis.pieces:
        seconds, room = piece.t1 - piece.t0, piece.x1 - piece.x0
        if room < 120 or seconds <= 0:
            continue
        step = next((s for s in NICE_STEPS_S if s >= seconds / (room / 90)), NICE_STEPS_S[-1])
        t = (piece.t0 // step + 1) * step
        while t < piece.t1:
            candidates.append((t, None))
            t += step
    placed: list[tuple[float, float, Tick]] = []
    for t, anchor in candidates:
        x = axis.x(t)
        label = clock(t, long_span)
        width = len(label) * CHAR_PX
        if anchor is None:
            anchor = "start" if x - width / 2 < axis.left else "end" if x + width / 2 > axis.right else "middle"
        lo = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
        lo = max(lo, axis.left) if anchor != "end" else lo
        if lo < axis.left - 1e-6 or lo + width > axis.right + 1e-6:
            continue
        if any(lo < b + 6 and a < lo + width + 6 for a, b, _ in placed):
            continue
        placed.append((lo, lo + width, Tick(x, label, anchor)))
    return [tick for _, _, tick in sorted(placed, key=lambda p: p[0])]


def clock(t: float, long_span: bool = False) -> str:
    moment = datetime.fromtimestamp(t, UTC)
    return moment.strftime("%m-%d %H:%M" if long_span else "%H:%M:%S")


def duration(seconds: float) -> str:
    """``+8 min``-style lengths: seconds below two minutes, minutes below two hours, then hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------------------------------------------- values


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


def overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]], tolerance: float) -> float:
    """The share of ``b``'s points that lie on ``a`` (same time, values within ``tolerance``)."""
    if not b:
        return 0.0
    at = dict(a)
    return sum(1 for t, v in b if t in at and abs(at[t] - v) <= tolerance) / len(b)


# ---------------------------------------------------------------------------------------------------- markers


def badge_rows(xs: Sequence[float], min_dx: float = BADGE_PX) -> list[int]:
    """A row for each badge (in the order given) so that badges of one row are at least ``min_dx`` apart."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    last: list[float] = []  # the x of the rightmost badge of each row
    rows = [0] * len(xs)
    for i in order:
        row = next((r for r, x in enumerate(last) if xs[i] - x >= min_dx), len(last))
        if row == len(last):
            last.append(xs[i])
        else:
            last[row] = xs[i]
        rows[i] = row
    return rows


@dataclass(frozen=True)
class MarkerMark:
    number: int
    x: float
    x_end: float
    row: int
    color: str
    title: str
    marker: Marker

    @property
    def badge_y(self) -> float:
        return TOP + 8 + self.row * (BADGE_PX - 2)

    @property
    def factor(self) -> str:
        return f"{_dash(self.marker.from_factor)}→{_dash(self.marker.to_factor)}"

    @property
    def downtime(self) -> str:
        return "" if self.marker.downtime_s is None else f"{self.marker.downtime_s:.3f}"


def marker_marks(markers: Sequence[Marker], axis: TimeAxis) -> list[MarkerMark]:
    """Each marker numbered from 1 (the page's list under the plots uses the same numbers), badges stacked."""
    xs = [axis.clamp(axis.x(m.at)) for m in markers]
    rows = badge_rows(xs)
    result = []
    for i, (m, x, row) in enumerate(zip(markers, xs, rows, strict=True)):
        end = axis.clamp(axis.x(m.until)) if m.until is not None else axis.right
        details = [f"{i + 1}. {m.label}", f"from {clock(m.at)}", f"event {m.event_id}", f"status {m.status}"]
        if m.mode:
            details.append(f"mode {m.mode}")
        color = MARKER_COLORS.get(m.kind, "#52606d")
        result.append(MarkerMark(i + 1, x, max(end, x), row, color, " · ".join(details), m))
    return result


# ---------------------------------------------------------------------------------------------------- a plot


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    title: str


@dataclass(frozen=True)
class SeriesMark:
    name: str
    color: str
    dashed: bool
    equal_to: str | None  # the earlier series it equals all along, if any
    points: int  # before thinning
    lines: tuple[str, ...]  # polyline coordinates, one per run without a pause or a cut
    dots: tuple[Dot, ...]  # drawn points with their tooltips (few points only)


@dataclass(frozen=True)
class Strip:
    x0: float
    x1: float
    title: str


@dataclass(frozen=True)
class LegendItem:
    x: float
    color: str
    text: str
    dashed: bool


@dataclass(frozen=True)
class PlotLayout:
    key: str
    title: str
    unit: str
    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    grid: tuple[tuple[float, str], ...]  # (y, label) of 0, half and the top value
    ticks: tuple[Tick, ...]
    breaks: tuple[Break, ...]
    markers: tuple[MarkerMark, ...]
    series: tuple[SeriesMark, ...]
    legend: tuple[LegendItem, ...]
    strips: tuple[Strip, ...]
    note: str | None


def layout(
    chart: Chart, markers: Sequence[Marker], axis: TimeAxis, *, width: int = WIDTH, height: int = HEIGHT
) -> PlotLayout:
    """Every position and text of one chart's plot on the shared axis."""
    bottom = float(height - BOTTOM)
    values = [v for s in chart.series for _, v in s.points]
    top_value = nice_max(max(values, default=0.0))

    def y(v: float) -> float:
        return bottom - v / top_value * (bottom - TOP)

    grid = tuple((y(top_value * i / 2), compact(top_value * i / 2)) for i in range(3))
    tolerance = OVERLAP * top_value
    drawn: list[SeriesMark] = []
    for i, s in enumerate(chart.series):
        points = thin(s.points)
        under = [o for o in chart.series[:i] if overlap(thin(o.points), points, tolerance) >= HIDDEN]
        equal = next(
            (o.name for o in under if len(o.points) == len(s.points) and overlap(o.points, s.points, tolerance) == 1),
            None,
        )
        lines = []
        for run in segments(points):
            for _, part in itertools.groupby(run, key=lambda p: axis.piece_of(p[0])):  # a cut breaks the line
                part_points = list(part)
                if len(part_points) > 1:
                    lines.append(" ".join(f"{axis.x(t):.1f},{y(v):.1f}" for t, v in part_points))
        dots: tuple[Dot, ...] = ()
        if len(points) <= DRAWN_POINTS:
            dots = tuple(Dot(axis.x(t), y(v), f"{clock(t)} · {s.name} {compact(v)} {chart.unit}") for t, v in points)
        drawn.append(SeriesMark(s.name, COLORS[i % len(COLORS)], bool(under), equal, len(s.points), tuple(lines), dots))
    legend = []
    x = axis.right
    for mark in reversed(drawn):  # right-aligned on the title's line
        text = f"{mark.name} = {mark.equal_to}" if mark.equal_to else mark.name
        legend.append(LegendItem(x, mark.color, text, mark.dashed))
        x -= 16 + CHAR_PX * len(text)
    strips: tuple[Strip, ...] = ()
    if any(len(m.dots) == 0 for m in drawn if m.points):
        strips = _strips(chart, axis)
    note = None
    if not values:
        note = chart.note or "no batches in this window"
    return PlotLayout(
        key=chart.key,
        title=chart.title,
        unit=chart.unit,
        width=width,
        height=height,
        left=axis.left,
        right=axis.right,
        top=float(TOP),
        bottom=bottom,
        grid=grid,
        ticks=tuple(ticks(axis)),
        breaks=tuple(axis.breaks),
        markers=tuple(marker_marks(markers, axis)),
        series=tuple(drawn),
        legend=tuple(reversed(legend)),
        strips=strips,
        note=note,
    )


def _strips(chart: Chart, axis: TimeAxis) -> tuple[Strip, ...]:
    """Invisible columns, one per time (thinned to ``MAX_STRIPS``), titled with every series' value there."""
    times = sorted({t for s in chart.series for t, _ in s.points})
    groups = [times[i : i + -(-len(times) // MAX_STRIPS)] for i in range(0, len(times), -(-len(times) // MAX_STRIPS))]
    values = [dict(s.points) for s in chart.series]
    centers = [axis.x(g[len(g) // 2]) for g in groups]
    strips = []
    for i, group in enumerate(groups):
        t = group[len(group) // 2]
        x0 = axis.left if i == 0 else (centers[i - 1] + centers[i]) / 2
        x1 = axis.right if i == len(groups) - 1 else (centers[i] + centers[i + 1]) / 2
        shown = [f"{s.name} {compact(v[t])}" for s, v in zip(chart.series, values, strict=True) if t in v]
        more = f" (1 of {len(group)} batches)" if len(group) > 1 else ""
        strips.append(Strip(x0, x1, f"{clock(t)} · {', '.join(shown)} {chart.unit}{more}"))
    return tuple(strips)


def _dash(value: object) -> str:
    return "" if value is None else str(value)
