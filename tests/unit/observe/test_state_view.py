"""The operator's view of a state: its compaction history and its per-task counts, from the compactor's metric rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pipelines.observe.state import compactions, per_task

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _rows(at: datetime, keys: int, expired: int, tasks: dict[str, int] | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"metric": f"state.totals.{name}", "value": float(value), "at": at, "task": None}
        for name, value in (("keys", keys), ("expired", expired), ("bytes", keys * 30), ("compaction_s", 0.5))
    ]
    rows += [
        {"metric": "state.totals.task_keys", "value": float(n), "at": at, "task": task}
        for task, n in (tasks or {}).items()
    ]
    return rows


def test_each_compaction_is_listed_newest_first_with_its_expiries() -> None:
    rows = [
        *_rows(T0, 100, 0, {"Partition 0-0-2": 60, "Partition 0-1-2": 40}),
        *_rows(T0 + timedelta(minutes=10), 80, 25, {"Partition 0-0-2": 30, "Partition 0-1-2": 50}),
        *_rows(T0 + timedelta(minutes=20), 90, 0),  # another state's rows do not mix in
        {"metric": "state.other.keys", "value": 7.0, "at": T0 + timedelta(minutes=30), "task": None},
    ]
    history = compactions("totals", rows)
    assert [(c["keys"], c["expired"]) for c in history] == [(90.0, 0.0), (80.0, 25.0), (100.0, 0.0)]
    assert history[1]["at"] == "2026-12-01T08:10:00+00:00" and history[1]["bytes"] == 2400.0
    # per task: the newest compaction that counted tasks (the one at 08:20 counted none), largest first
    assert per_task("totals", rows) == [
        {"task": "Partition 0-1-2", "keys": 50, "bytes": 0},
        {"task": "Partition 0-0-2", "keys": 30, "bytes": 0},
    ]
    assert compactions("nothing", rows) == [] and per_task("nothing", rows) == []
