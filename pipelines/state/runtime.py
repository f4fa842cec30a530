"""Where a running job meets its states: the planner names their segments, tasks use them, the commit lands them.

Planner (``driver_versions``, from the elastic source's ``latestOffset``)
    Before a micro-batch is planned, each state's last committed segment and the store's time go into the
    batch's end offset under ``OFFSET_KEY``. Spark logs that offset before the batch runs, so a replay reads the
    same segments and judges time-to-live at the same time. Batches run one after another (Spark plans the next
    only once the last committed), so a batch's segment is always the latest.

Tasks (``open_task``, from the processing step)
    A task finds its batch's versions in its ``TaskRange`` and opens its states at exactly those segments
    (``pipelines.state.task``). A task of a batch whose states already committed (a replay after the driver
    died between the commits) runs no function at all: the batch's outputs are the ones its first run
    committed, which the sink's commit takes from the batch's manifest.

Commit (``commit_states``, from the sink's commit, on the driver)
    Each state's change files, as segment ``planned + 1``, after the sink's tables (docs/design.md, "Keyed state").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.core import state as rules
from pipelines.state.durable import ChangeFile, StateTables
from pipelines.state.task import OFFSET_KEY, StateVersions, TaskStates
from pipelines.storage.home import Home

__all__ = ["OFFSET_KEY", "commit_states", "driver_versions", "ensure_tables", "open_task", "task_ready"]

_TABLES: dict[tuple[str, str, str], StateTables] = {}
_TABLES_LOCK = threading.Lock()


def tables_for(home: Home, job: str, spec: rules.StateSpec) -> StateTables:
    """This process's handles of one state's tables (kept: a refresh reads only the commits since)."""
    key = (str(home.root), job, spec.name)
    with _TABLES_LOCK:
        held = _TABLES.get(key)
        if held is None or held.spec != spec:
            held = _TABLES[key] = StateTables(home, job, spec)
        return held


def ensure_tables(home: Home, job: str, specs: Sequence[rules.StateSpec]) -> None:
    """Every state's tables exist with every column its spec has (``job create``, a rescale, a query's start)."""
    for spec in specs:
        tables_for(home, job, spec).ensure()


def driver_versions(home: Home, job: str, specs: Sequence[rules.StateSpec]) -> dict[str, Any]:
    """The versions the next micro-batch reads: each state's last committed segment and the store's time."""
    from pipelines.storage.clock import store_clock

    segments = {spec.name: tables_for(home, job, spec).segment() for spec in specs}
    now = store_clock(home.root).now()
    return StateVersions(segments, int(now.timestamp() * 1_000_000)).to_json()


def task_ready(
    home: Home,
    job: str,
    specs: Sequence[rules.StateSpec],
    versions: Mapping[str, Any],
    *,
    factor: int,
    bucket: int,
    model_version: int,
    batch_id: int,
) -> TaskStates:
    """A task's states at its batch's versions."""
    return TaskStates(
        home,
        job,
        specs,
        StateVersions.from_json(versions),
        factor=factor,
        bucket=bucket,
        model_version=model_version,
        batch_id=batch_id,
    )


open_task = task_ready


def already_committed(home: Home, job: str, specs: Sequence[rules.StateSpec], app_id: str, batch_id: int) -> bool:
    """Whether micro-batch ``(app_id, batch_id)`` committed the changes of any of its states (then of all: a
    batch's manifest commits every one)."""
    return any(tables_for(home, job, spec).committed(app_id, batch_id) for spec in specs)


def commit_states(
    home: Home,
    job: str,
    specs: Sequence[rules.StateSpec],
    files: Mapping[str, Sequence[ChangeFile]],
    planned: Mapping[str, Any] | None,
    *,
    app_id: str,
    batch_id: int,
) -> dict[str, float]:
    """Commit each state's change files of one batch; figures for the metrics table (per state and in all)."""
    figures: dict[str, float] = {}
    if not specs or planned is None:
        return figures
    versions = StateVersions.from_json(planned)
    t0 = time.perf_counter()
    for spec in specs:
        mine = list(files.get(spec.name, ()))
        if not mine:
            continue
        previous = versions.segments.get(spec.name, 0)
        landed = tables_for(home, job, spec).commit(
            mine, previous=previous, app_id=app_id, batch_id=batch_id, time_us=versions.time_us
        )
        figures[f"state.{spec.name}.segment"] = float(landed if landed is not None else previous + 1)
        figures[f"state.{spec.name}.rows_written"] = float(sum(f.rows for f in mine))
    figures["state_commit_s"] = time.perf_counter() - t0
    return figures
