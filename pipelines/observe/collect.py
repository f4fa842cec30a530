"""One job's observation, read from the control plane: what the page, the JSON API and ``pipelines status`` show.

Reads only what it shows: the metric rows of the last ``minutes`` (files
pruned by their ``at`` statistics) and only the metric names the view uses
(``series.METRICS_READ``), the scaling events, the active model and its
latest checkpoints. Each part fails alone: its error is reported in
``errors`` and the others are still shown. The inputs are asked last, each
within ``systems.TIMEOUT_S``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pipelines.control import ControlPlane
from pipelines.core.limits import MAX_MINUTES, shown
from pipelines.errors import ConfigError
from pipelines.observe.series import METRICS_READ, batches, charts, fault_notes, markers, outage_markers
from pipelines.observe.tasks import task_table
from pipelines.storage.home import Home

DEFAULT_MINUTES = 60.0
MAX_FILES = 300
"""At most this many metric files are read (a file per commit: about 150 micro-batches with the driver's
duration rows); a busy job's window starts later than ``minutes`` ago (``window.capped``)."""


def check_minutes(minutes: float) -> float:
    """A window of ``minutes``: a finite number from 0 to ``MAX_MINUTES`` (ten years; before year 1 is no date)."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not 0 <= minutes <= MAX_MINUTES:
        raise ConfigError(
            f"--minutes must be a number of minutes from 0 to {MAX_MINUTES:,} (ten years), got {shown(minutes)}"
        )
    return minutes


def observe(
    home: Home,
    job: str,
    *,
    minutes: float = DEFAULT_MINUTES,
    control: ControlPlane | None = None,
    inputs: bool = True,
    driver: bool = True,
    now: float | None = None,
) -> dict[str, Any]:
    """Plain JSON-able data: window, driver, batches, charts, faults, markers, tasks, inputs, state, errors.

    The active model is read first and its errors propagate (an unknown job is
    ``UnknownJobError``, which the CLI turns into its refusal); everything
    after it fails alone.
    """
    check_minutes(minutes)
    control = control or ControlPlane(home)
    model = control.job_models.active(job)
    now = control.clock.now_s() if now is None else now  # the clock the rows' ``at`` is on: the store's
    since = now - minutes * 60.0
    errors: dict[str, str] = {}
    result: dict[str, Any] = {
        "job": job,
        "model_version": model.version,
        "factor": model.elasticity_factor,
        "window": {"minutes": minutes, "since": _iso(since), "until": _iso(now)},
    }
    if driver:
        result["driver"] = None
        try:
            result["driver"] = driver_section(control, model, now)
        except Exception as e:
            errors["driver"] = _error(e)
    rows: list[dict[str, Any]] = []
    try:
        start = control.metrics.recent_start(job, datetime.fromtimestamp(since, UTC), MAX_FILES).timestamp()
        if start > since:
            result["window"].update(since=_iso(start), capped=f"the newest {MAX_FILES} metric files only")
            since = start
        frame = control.metrics.read(job, metrics=METRICS_READ, since=datetime.fromtimestamp(since, UTC))
        rows = frame.to_dict("records")
    except Exception as e:
        errors["metrics"] = _error(e)
    points = batches(rows)
    try:
        events = [
            {**vars(e), "status": str(e.status), "details": dict(e.details or {})} for e in control.events.history(job)
        ]
        marks = sorted(markers(events, since=since) + outage_markers(rows), key=lambda m: (m.at, m.event_id))
    except Exception as e:
        errors["markers"] = _error(e)
        marks = []
    result["batches"] = len(points)
    result["latest"] = points[-1].to_dict() if points else None
    result["charts"] = [c.to_dict() for c in charts(points)]
    result["faults"] = fault_notes(points)
    result["markers"] = [m.to_dict() for m in marks]
    checkpoints: dict[Any, str] = {}
    try:
        checkpoints = dict(control.checkpoints.latest(job, model.version).offsets)
    except Exception as e:
        errors["checkpoints"] = _error(e)
    held: dict[Any, str] = {}
    result["inputs"] = None
    if inputs:
        try:
            from pipelines.jobs.config import job_config
            from pipelines.observe.systems import inspect_inputs

            config = job_config(model)
            views, held = inspect_inputs(home, job, sorted(model.partitions()), config.systems, checkpoints)
            result["inputs"] = views
        except Exception as e:
            errors["inputs"] = _error(e)
    result["tasks"] = [r.to_dict() for r in task_table(model, checkpoints, rows, points, held)]
    result["state"] = None
    try:
        from pipelines.jobs.config import job_config

        specs = job_config(model).state
        if specs:
            from pipelines.observe.state import state_view

            result["state"] = state_view(home, job, specs, control, since)
            if result["state"]["chart"]["series"]:  # drawn with the other plots, on their time axis
                result["charts"].append(result["state"]["chart"])
    except Exception as e:
        errors["state"] = _error(e)
    result["errors"] = errors
    return result


def driver_section(control: ControlPlane, model: Any, now: float | None = None) -> dict[str, Any]:
    """Whether the job's driver runs, where, since when (``observe.drivers``), from the ``drivers`` table."""
    from pipelines.jobs.config import job_config
    from pipelines.observe.drivers import driver_view

    # Ages on the store's clock, which the drivers stamp their rows with: this host's clock may be off.
    at = control.drivers.now() if now is None else datetime.fromtimestamp(now, UTC)
    try:
        trigger: str | None = job_config(model).trigger
    except Exception:  # a model without a readable config: whether it should run is unknown, not a failure
        trigger = None
    return driver_view(control.drivers.latest(model.job_name, now=at), trigger, at)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _error(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"
