"""An observation (``collect.observe``'s data) as HTML and as text.

* ``html_section``: the plots, the per-task table and the inputs, as a fragment
  the Airflow page puts in each job's card; it uses the page's classes
  (``pill ok/warn/bad/info``, ``muted``, ``mono``) and inline SVG only.
* ``export_page``: the same fragment in a self-contained HTML document
  (``pipelines status JOB --export FILE.html``): no script, no link, no font.
* ``text``: the terminal view of ``pipelines status`` (one shot or ``--watch``),
  with a sparkline per plot.

Everything is drawn from the JSON form, so the page, the API, the CLI and the
export show the same figures.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pipelines.observe.series import Chart, Marker
from pipelines.observe.svg import WIDTH, compact, plot, time_axis

TASKS_SHOWN = 50
TEXT_TASKS_SHOWN = 12
SPARK = "▁▂▃▄▅▆▇█"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: Any, unit: str = "") -> str:
    if value is None:
        return "–"
    return compact(float(value)) + unit


def _objects(obs: Mapping[str, Any]) -> tuple[list[Chart], list[Marker]]:
    return [Chart.from_dict(c) for c in obs.get("charts") or []], [
        Marker.from_dict(m) for m in obs.get("markers") or []
    ]


# ---------------------------------------------------------------------------------------------------- html


def html_section(obs: Mapping[str, Any] | None, *, width: int = WIDTH) -> str:
    """The plots, the per-task table and the inputs of one job."""
    if not obs:
        return ""
    charts, marks = _objects(obs)
    axis = time_axis(charts, marks, width)
    window = obs.get("window") or {}
    parts = [
        f"<div class='observe' data-job='{_e(obs.get('job'))}'>",
        f"<h3>Over the last {_e(_minutes(window.get('minutes')))} "
        f"<span class='muted'>({_e(obs.get('batches'))} micro-batches, "
        f"{len(marks)} scaling step(s); times UTC)</span></h3>",
        "<div class='obs-plots' style='display:flex;flex-wrap:wrap;gap:10px'>",
    ]
    for chart in charts:
        parts.append(
            "<div class='obs-plot-box' style='border:1px solid #e4e7eb;border-radius:6px;overflow:hidden'>"
            + plot(chart, marks, axis, width=width)
            + "</div>"
        )
    parts.append("</div>")
    if marks:
        parts.append(
            "<div class='obs-markers muted' style='margin-top:4px'>"
            + " · ".join(
                f"<span class='pill {_marker_class(m)}' data-event='{_e(m.event_id)}'>"
                f"{_e(_when(m.at))} {_e(m.label)}</span>"
                for m in marks
            )
            + "</div>"
        )
    parts.append(_tasks_table(obs.get("tasks") or []))
    if obs.get("inputs") is not None:
        parts.append(_inputs(obs["inputs"]))
    for section, error in (obs.get("errors") or {}).items():
        parts.append(f"<div class='err'>{_e(section)}: {_e(error)}</div>")
    parts.append("</div>")
    return "".join(parts)


def _marker_class(m: Marker) -> str:
    return "bad" if m.status in ("failed", "dq failed") else "warn" if m.status == "rolled back" else "info"


def _tasks_table(tasks: Sequence[Mapping[str, Any]]) -> str:
    head = (
        f"<h3>Virtual tasks <span class='muted'>slowest first (busy time per batch over the last batches); "
        f"{sum(1 for t in tasks if t.get('skewed'))} skewed, {sum(1 for t in tasks if t.get('held'))} held back"
        "</span></h3>"
    )
    if not tasks:
        return head + "<p class='muted'>No virtual task.</p>"
    cols = ["task", "key bucket", "reads", "checkpoint", "lag", "records/s", "records (share)", "busy/batch", "held"]
    rows = []
    for t in tasks[:TASKS_SHOWN]:
        share = t.get("share")
        skew = t.get("skew")
        bar = (
            f"<span style='display:inline-block;height:8px;width:{min(100.0, (share or 0) * 100 * 2):.0f}px;"
            f"background:{'#dc2626' if t.get('skewed') else '#93c5fd'};margin-right:4px'></span>"
        )
        share_text = "–" if share is None else f"{share * 100:.1f}%"
        skew_pill = f" <span class='pill bad skew'>skew {skew:.1f}×</span>" if t.get("skewed") else ""
        lag = _num(t.get("lag_records"))
        if t.get("lag_s") is not None:
            lag = f"{float(t['lag_s']):.1f} s" if t.get("lag_records") is None else f"{lag} · {float(t['lag_s']):.1f} s"
        held = f"<span class='pill warn held'>{_e(t['held'])}</span>" if t.get("held") else ""
        bucket = "–" if t.get("key_bucket") is None else f"{t['key_bucket']} of {t['factor']}"
        checkpoints = "<br>".join(f"{_e(k)} @ {_e(v)}" for k, v in (t.get("checkpoints") or {}).items())
        style = " style='background:#fff5f5'" if t.get("skewed") else ""
        rows.append(
            f"<tr data-task='{_e(t['task'])}'{' class=skewed' if t.get('skewed') else ''}{style}>"
            f"<td class='mono'>{_e(t['task'])}</td><td>{_e(bucket)}</td>"
            f"<td class='mono'>{_e(', '.join(t.get('inputs') or []))}</td>"
            f"<td class='mono'>{checkpoints or '–'}</td><td>{_e(lag)}</td>"
            f"<td>{_e(_num(t.get('rate')))}</td>"
            f"<td>{bar}{_e(_num(t.get('records')))} ({_e(share_text)}){skew_pill}</td>"
            f"<td>{_e(_num(t.get('busy_s'), ' s'))}</td><td>{held}</td></tr>"
        )
    more = (
        f"<p class='muted'>{len(tasks) - TASKS_SHOWN} more tasks in the JSON.</p>" if len(tasks) > TASKS_SHOWN else ""
    )
    header = "".join(f"<th>{_e(c)}</th>" for c in cols)
    return (
        head + f"<table class='obs-tasks'><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"
    )


def _inputs(views: Sequence[Mapping[str, Any]]) -> str:
    parts = ["<h3>Inputs</h3>"]
    for v in views:
        parts.append(f"<div class='obs-input' data-input='{_e(v['input'])}' data-system='{_e(v['system'])}'>")
        title = {"kafka": "Kafka topic", "kinesis": "Kinesis stream", "deltalog": "embedded log stream"}.get(
            v["system"], f"{v['system']} stream"
        )
        if not v.get("reachable"):
            parts.append(
                f"<p><b>{_e(title)} {_e(v['stream'])}</b> <span class='pill bad unreachable'>unreachable</span> "
                f"<span class='err'>{_e(v.get('error'))}</span></p></div>"
            )
            continue
        details = v.get("details") or {}
        facts = ", ".join(
            f"{k} {_e(details[k])}" for k in ("brokers", "cluster_id", "status", "mode") if details.get(k)
        )
        parts.append(
            f"<p><b>{_e(title)} {_e(v['stream'])}</b> <span class='pill ok'>reachable</span> "
            f"<span class='muted'>{len(v.get('partitions') or [])} partition(s)"
            f"{'; ' + facts if facts else ''}</span></p>"
        )
        group = v.get("consumer_group")
        if group:
            parts.append(
                f"<p class='obs-group'>consumer group <span class='mono'>{_e(group['group'])}</span>: lag "
                f"<b>{_e(_dash(group.get('lag')))}</b> records"
                + ("" if group.get("commits_progress") else " <span class='pill warn'>commit_progress is off</span>")
                + "</p>"
            )
        if v["system"] == "kinesis" or v.get("shards") is not None:
            parts.append(
                _table(
                    ["slot (SSP)", "shards", "checkpoint", "held"],
                    [
                        [
                            _e(p["partition"]),
                            _e(", ".join(p.get("shards") or [])),
                            f"<span class='mono'>{_e(p.get('checkpoint'))}</span>",
                            _e(_dash(p.get("held"))),
                        ]
                        for p in v.get("partitions") or []
                    ],
                    "obs-slots",
                )
            )
            parts.append(
                _table(
                    ["shard", "parents", "children", "open", "slot", "state"],
                    [
                        [
                            f"<span class='mono'>{_e(s['shard'])}</span>",
                            _e(", ".join(s.get("parents") or []) or "–"),
                            _e(", ".join(s.get("children") or []) or "–"),
                            "open" if s.get("open") else "closed",
                            _e(_dash(s.get("slot"))),
                            _e(s.get("state")),
                        ]
                        for s in v.get("shards") or []
                    ],
                    "obs-shards",
                )
            )
        else:
            committed = {r["partition"]: r for r in (group or {}).get("partitions") or []}
            cols = ["partition", "earliest", "end", "job at", "records behind", "held"]
            if group:
                cols += ["group committed", "group lag"]
            rows = []
            for p in v.get("partitions") or []:
                row = [
                    _e(p["partition"]),
                    _e(p.get("earliest")),
                    _e(p.get("end")),
                    _e(_dash(p.get("checkpoint")) if p.get("read_by_job", True) else "not read by the job"),
                    _e(_dash(p.get("records_behind"))),
                    _e(_dash(p.get("held"))),
                ]
                if group:
                    c = committed.get(p["partition"], {})
                    row += [_e(_dash(c.get("committed"))), _e(_dash(c.get("lag")))]
                rows.append(row)
            parts.append(_table(cols, rows, "obs-partitions"))
        for x in v.get("expansions") or []:
            parts.append(
                f"<p class='muted'>expanded {_e(x.get('from_partitions'))} → {_e(x.get('to_partitions'))} "
                f"partitions at {_e(str(x.get('at'))[:19])}</p>"
            )
        parts.append("</div>")
    return "".join(parts)


def _table(cols: Iterable[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


EXPORT_CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 16px 24px; color: #1f2933; font-size: 14px; }
h1 { font-size: 20px; } h3 { font-size: 14px; margin: 16px 0 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eef2f6; vertical-align: top; }
th { color: #52606d; background: #f5f7fa; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.ok { background: #e3f9e5; color: #0e5814; } .bad { background: #ffe3e3; color: #8a1c1c; }
.warn { background: #fff3c4; color: #7c5e10; } .info { background: #e6f0ff; color: #1d4f91; }
.muted { color: #7b8794; } .mono { font-family: monospace; font-size: 12px; }
.err { color: #8a1c1c; font-family: monospace; font-size: 12px; }
"""


def export_page(obs: Mapping[str, Any]) -> str:
    """A self-contained HTML report of one job: inline CSS and SVG, nothing fetched."""
    title = f"{obs.get('job')}: model v{obs.get('model_version')}, factor {obs.get('factor')}"
    window = obs.get("window") or {}
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{EXPORT_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1><p class='muted'>{_e(window.get('since'))} – {_e(window.get('until'))}</p>"
        f"{html_section(obs)}</body></html>"
    )


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
    if marks:
        lines += ["", "scaling steps:"]
        lines += [f"  {_when(m.at)}  {m.label}  ({m.status}, event {m.event_id[:12]})" for m in marks]
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
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
        if len(tasks) > TEXT_TASKS_SHOWN:
            lines.append(f"... {len(tasks) - TEXT_TASKS_SHOWN} more (--json has all)")
    for v in obs.get("inputs") or []:
        lines.append("")
        if not v.get("reachable"):
            lines.append(f"input {v['input']}: UNREACHABLE: {v.get('error')}")
            continue
        lines.append(f"input {v['input']}: {len(v.get('partitions') or [])} partition(s)")
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
