"""A stateful job's keyed state, as the operator's view shows it: each state's size, its compactions and its tasks.

Read from the state's own tables (rows, bytes, segments: ``pipelines.state.inspect.describe``) and from the rows
each compaction adds to the metrics table (``state.<name>.keys``, ``.bytes``, ``.expired``, ``.compaction_s`` as
the job's rows, ``.task_keys`` and ``.task_bytes`` per virtual task of the model in force): the state's growth over
the window as a plot, the last compaction (when, how many keys, how many expired), and per virtual task how many
keys and bytes of the state it owns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pipelines.control import ControlPlane
from pipelines.observe.series import Chart, Series, epoch
from pipelines.storage.home import Home

FIGURES = ("keys", "bytes", "expired", "compaction_s", "segment")
PER_TASK = ("task_keys", "task_bytes")
HISTORY = 10
"""Compactions listed per state, newest first (the plot shows every one in the window)."""


def metric_names(states: Iterable[str]) -> list[str]:
    """The metric rows of these states that the view reads."""
    return [f"state.{s}.{f}" for s in states for f in (*FIGURES, *PER_TASK)]


def state_view(home: Home, job: str, specs: Iterable[Any], control: ControlPlane, since: float) -> dict[str, Any]:
    """``{"states": [...], "chart": Chart}``: one entry per state, and the keys of every state over the window."""
    from pipelines.state.inspect import describe

    specs = list(specs)
    names = [s.name for s in specs]
    rows = control.metrics.read(job, metrics=metric_names(names), since=datetime.fromtimestamp(since, UTC))
    records = rows.to_dict("records") if len(rows) else []
    states = []
    for figures in describe(home, job, specs):
        name = figures["state"]
        mine = [r for r in records if str(r["metric"]).startswith(f"state.{name}.")]
        history = compactions(name, mine)
        states.append(
            {
                **figures,
                "last_compaction": history[0] if history else None,
                "compactions": history[:HISTORY],
                "tasks": per_task(name, mine),
            }
        )
    series = [
        Series(f"{name} keys", points)
        for name in names
        if (points := _points(r for r in records if r["metric"] == f"state.{name}.keys"))
    ]
    chart = Chart(
        "state",
        "Keyed state",
        "keys",
        tuple(series),
        None if series else "no compaction in the window yet (a running driver compacts at least every 10 minutes)",
    )
    return {"states": states, "chart": chart.to_dict()}


def compactions(state: str, rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each compaction in the window, newest first, with its figures (keys, bytes, expired, seconds, segment, at):
    the state's history, where a time-to-live's expiries show (a compaction drops the keys that outlived it)."""
    mine = [r for r in rows if r.get("task") is None and str(r["metric"]).startswith(f"state.{state}.")]
    at_keys = sorted({epoch(r["at"]) for r in mine if r["metric"] == f"state.{state}.keys"}, reverse=True)
    history = []
    for at in at_keys:
        same = {str(r["metric"]).rsplit(".", 1)[1]: float(r["value"]) for r in mine if abs(epoch(r["at"]) - at) < 1.0}
        history.append(
            {"at": datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds"), **{k: same.get(k) for k in FIGURES}}
        )
    return history


def per_task(state: str, rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each virtual task's keys and bytes of the state at the newest compaction that counted them, largest first."""
    counted = [r for r in rows if r["metric"] in (f"state.{state}.task_keys", f"state.{state}.task_bytes")]
    if not counted:
        return []
    newest = max(epoch(r["at"]) for r in counted)
    tasks: dict[str, dict[str, Any]] = {}
    for r in counted:
        if abs(epoch(r["at"]) - newest) >= 1.0 or r.get("task") is None:
            continue
        entry = tasks.setdefault(str(r["task"]), {"task": str(r["task"]), "keys": 0, "bytes": 0})
        entry["keys" if str(r["metric"]).endswith("task_keys") else "bytes"] = int(r["value"])
    return sorted(tasks.values(), key=lambda t: (-t["keys"], t["task"]))


def _points(rows: Iterable[Mapping[str, Any]]) -> tuple[tuple[float, float], ...]:
    return tuple(sorted((epoch(r["at"]), float(r["value"])) for r in rows))
