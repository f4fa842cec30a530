"""An observation (``collect.observe``'s data) as HTML and as text.

* ``view``: what the HTML templates draw for one job (``templates/observe/section.html``):
  the plots' layouts on one shared time axis and the numbered scaling steps;
  the Airflow page includes that template in each job's card.
* ``export_page``: the same section in a self-contained HTML document
  (``pipelines status JOB --export FILE.html``): no script, no link, no font.
* ``text``: the terminal view of ``pipelines status`` (one shot or ``--watch``),
  with a sparkline per plot.

Everything is drawn from the JSON form, so the page, the API, the CLI and the
export show the same figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipelines.core.segments import retention_text
from pipelines.observe.html import render
from pipelines.observe.series import Chart, Marker
from pipelines.observe.svg import WIDTH, MarkerMark, PlotLayout, compact, layout, marker_marks, time_axis
from pipelines.texttable import table

TASKS_SHOWN = 50
TEXT_TASKS_SHOWN = 12
SPARK = "▁▂▃▄▅▆▇█"


def _num(value: Any, unit: str = "") -> str:
    if value is None:
        return "–"
    return compact(float(value)) + unit


def _objects(obs: Mapping[str, Any]) -> tuple[list[Chart], list[Marker]]:
    return [Chart.from_dict(c) for c in obs.get("charts") or []], [
        Marker.from_dict(m) for m in obs.get("markers") or []
    ]


# ---------------------------------------------------------------------------------------------------- html


@dataclass(frozen=True)
class MarkerItem:
    """A numbered scaling step in the list under the plots (its number is its badge's on every plot)."""

    number: int
    marker: Marker
    pill: str


@dataclass(frozen=True)
class View:
    obs: Mapping[str, Any]
    plots: tuple[PlotLayout, ...]
    markers: tuple[MarkerItem, ...]
    cuts: int  # idle stretches cut out of the shared time axis
    tasks_shown: int = TASKS_SHOWN


def view(obs: Mapping[str, Any], *, width: int = WIDTH) -> View:
    """The plots of one job on one shared time axis, and its scaling steps numbered as on the plots."""
    charts, marks = _objects(obs)
    axis = time_axis(charts, marks, width)
    numbered: list[MarkerMark] = marker_marks(marks, axis)
    return View(
        obs=obs,
        plots=tuple(layout(c, marks, axis, width=width) for c in charts),
        markers=tuple(MarkerItem(m.number, m.marker, _marker_class(m.marker)) for m in numbered),
        cuts=len(axis.breaks),
    )


def plot(chart: Chart, markers: Sequence[Marker], axis: Any, *, width: int = WIDTH) -> str:
    """One chart as an inline ``<svg>`` element, its markers on it (the template of every plot)."""
    return render("observe/plot.svg", p=layout(chart, markers, axis, width=width))


def html_section(obs: Mapping[str, Any] | None, *, width: int = WIDTH) -> str:
    """The plots, the per-task table and the inputs of one job, as an HTML fragment."""
    if not obs:
        return ""
    return render("observe/section.html", v=view(obs, width=width))


def _marker_class(m: Marker) -> str:
    return "bad" if m.status in ("failed", "dq failed") else "warn" if m.status == "rolled back" else "info"


def export_page(obs: Mapping[str, Any]) -> str:
    """A self-contained HTML report of one job: inline CSS and SVG, nothing fetched."""
    title = f"{obs.get('job')}: model v{obs.get('model_version')}, factor {obs.get('factor')}"
    return render("observe/export.html", title=title, v=view(obs))


# ---------------------------------------------------------------------------------------------------- text


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """The last ``width`` values as block characters, scaled to their own maximum."""
    values = list(values)[-width:]
    if not values:
        return ""
    top = max(values) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in values)


def text(obs: Mapping[str, Any], *, width: int = 40) -> str:
    """The terminal view: latest figures, a sparkline per plot, scaling steps, the slowest tasks, the inputs."""
    charts, marks = _objects(obs)
    window = obs.get("window") or {}
    lines = [
        f"job {obs['job']}: model v{obs['model_version']}, factor {obs['factor']} · "
        f"{obs.get('batches', 0)} micro-batches in the last {_minutes(window.get('minutes'))} "
        f"(until {str(window.get('until', ''))[:19].replace('T', ' ')} UTC)"
    ]
    driver = obs.get("driver")
    if driver:
        lines.append(("DOWN: " if driver.get("down") else "driver ") + str(driver.get("summary")))
    latest = obs.get("latest")
    if latest:
        lag = latest.get("lag_records")
        lag_text = f"{lag} records" if lag is not None else "unknown"
        if latest.get("lag_s") is not None:
            lag_text = f"{lag_text if lag is not None else ''} {float(latest['lag_s']):.1f} s behind".strip()
        lines.append(
            f"latest batch {latest['batch']} (v{latest['version']}, {_when(latest['at'])}): "
            f"{latest['records_in']} in, {latest['records_out']} out, {_num(latest.get('rate_in'))} records/s, "
            f"{_num(latest.get('duration_s'), ' s')} long, lag {lag_text}"
        )
    lines.append("")
    for c in charts:
        for s in c.series:
            values = [v for _, v in s.points]
            now = _num(values[-1]) if values else "–"
            peak = _num(max(values)) if values else "–"
            lines.append(
                f"{c.title + ' · ' + s.name:<36} {sparkline(values, width):<{width}}  "
                f"now {now:>7}  max {peak:>7} {c.unit}"
            )
        if not c.series and c.note:
            lines.append(f"{c.title:<36} {c.note}")
    faults = obs.get("faults") or []
    if faults:
        lines += ["", "Spark faults (task attempts retried, executors lost):"]
        lines += [f"  {f}" for f in faults]
    if marks:
        lines += ["", "scaling steps:"]
        lines += [
            f"  {i}. {_when(m.at)}  {m.label}  ({m.status}, event {m.event_id[:12]})" for i, m in enumerate(marks, 1)
        ]
    tasks = obs.get("tasks") or []
    if tasks:
        lines += ["", f"virtual tasks, slowest first ({len(tasks)}; ! = skewed, H = held back):"]
        header = ["", "TASK", "BUCKET", "LAG", "REC/S", "RECORDS", "SHARE", "BUSY/BATCH", "HELD"]
        rows = []
        for t in tasks[:TEXT_TASKS_SHOWN]:
            flag = ("!" if t.get("skewed") else " ") + ("H" if t.get("held") else " ")
            share = "–" if t.get("share") is None else f"{t['share'] * 100:.1f}%"
            rows.append(
                [
                    flag,
                    t["task"],
                    "–" if t.get("key_bucket") is None else f"{t['key_bucket']}/{t['factor']}",
                    _dash(t.get("lag_records")),
                    _num(t.get("rate")),
                    str(t.get("records")),
                    share,
                    _num(t.get("busy_s"), " s"),
                    _dash(t.get("held")),
                ]
            )
        lines += table(header, rows).splitlines()
        if len(tasks) > TEXT_TASKS_SHOWN:
            lines.append(f"... {len(tasks) - TEXT_TASKS_SHOWN} more (--json has all)")
    for st in (obs.get("state") or {}).get("states") or []:
        lines.append("")
        last = st.get("last_compaction") or {}
        ttl = f", time-to-live {_num(st['ttl_s'], ' s')}" if st.get("ttl_s") else ""
        lines.append(
            f"state {st['state']}: {st['keys_in_current']:,} keys in current (as of segment {st['current_as_of']}, "
            f"the last committed {st['segment']}), {st['rows']:,} rows and {_num(st['bytes'])} bytes in the home{ttl}"
        )
        if last:
            lines.append(
                f"  last compaction {str(last.get('at'))[:19].replace('T', ' ')}: {_num(last.get('keys'))} keys, "
                f"{_num(last.get('expired'))} expired, {_num(last.get('compaction_s'), ' s')}"
            )
        for t in (st.get("tasks") or [])[:TEXT_TASKS_SHOWN]:
            lines.append(f"  {t['task']}: {t['keys']:,} keys, {_num(t['bytes'])} bytes")
    for v in obs.get("inputs") or []:
        lines.append("")
        if not v.get("reachable"):
            lines.append(f"input {v['input']}: UNREACHABLE: {v.get('error')}")
            continue
        own = (v.get("details") or {}).get("retention_ms")
        kept = f", retention {retention_text(own)}" if own is not None else ""
        lines.append(f"input {v['input']}: {len(v.get('partitions') or [])} partition(s){kept}")
        group = v.get("consumer_group")
        if group:
            lines.append(f"  consumer group {group['group']}: lag {_dash(group.get('lag'))} records")
        for p in v.get("partitions") or []:
            extra = f" shards {', '.join(p['shards'])}" if p.get("shards") is not None else ""
            behind = f", {p['records_behind']} behind" if p.get("records_behind") is not None else ""
            held = f", HELD: {p['held']}" if p.get("held") else ""
            lines.append(f"  [{p['partition']}] job at {_dash(p.get('checkpoint'))}{behind}{extra}{held}")
        for s in v.get("shards") or []:
            state = "open" if s.get("open") else "closed"
            lines.append(
                f"  shard {s['shard']} ({state}, {s.get('state')}, slot {_dash(s.get('slot'))}) "
                f"parents {', '.join(s.get('parents') or []) or '-'} "
                f"children {', '.join(s.get('children') or []) or '-'}"
            )
    for section, error in (obs.get("errors") or {}).items():
        lines.append(f"error in {section}: {error}")
    return "\n".join(lines)


def _minutes(value: Any) -> str:
    if value is None:
        return "?"
    minutes = float(value)
    return f"{minutes:g} min" if minutes < 120 else f"{minutes / 60:g} h"


def _when(t: float) -> str:
    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M:%S")


def _dash(value: Any) -> str:
    return "–" if value is None else str(value)
