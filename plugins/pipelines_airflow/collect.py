"""What the "Elastic pipelines" page shows, as plain JSON-able data: every job of the control plane.

No HTML and no web framework here: ``collect`` returns the dictionaries that
``GET /elastic-pipelines/api/jobs`` serves as they are and the templates draw.
Per job: the active model (version, factor, grouper, virtual tasks,
partitions per input and whether an input has grown since), whether its
driver runs (``driver``: where, since when, last heartbeat and batch; a
continuous job without one is ``down``), the latest scaling events, the
latest data-quality verdicts (with their Data Docs pages and DAG runs), the
latest autosize decisions, the scaling lock, the adjunct data stores, and the
operator's view over time (``observe``: plots, virtual tasks, inputs).

Each section fails alone: its error is shown in ``errors`` and the others
are still collected, so one unreadable table never takes the page down. The
control plane is read fresh on every call (``PIPELINES_HOME``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from pipelines_airflow import autosize_runs, datadocs
from pipelines_airflow.page import plain

EVENTS_SHOWN = 10
DQ_WINDOWS_SHOWN = 5
DECISIONS_SHOWN = 10
OBSERVE_MINUTES = 60.0


def collect(job: str | None = None, home: Any = None) -> dict[str, Any]:
    """``{"home", "generated_at", "jobs": [...]}``, narrowed to one job when ``job`` is given (``UnknownJobError``
    when it has no model)."""
    from pipelines.control import ControlPlane
    from pipelines.storage.home import resolve_home

    home = home if home is not None else resolve_home()
    control = ControlPlane(home)
    names = control.job_models.jobs()
    if job is not None:
        if job not in names:  # an empty list would read as "this job has nothing" rather than "no such job"
            raise control.job_models.unknown_job(job)
        names = [job]
    return {
        "home": str(home.root),
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "jobs": [job_status(control, home, name) for name in names],
    }


def job_status(control: Any, home: Any, job: str) -> dict[str, Any]:
    """One job's state, section by section."""
    status: dict[str, Any] = {"job": job, "errors": {}}
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("model", lambda: model(control, home, job)),
        ("driver", lambda: driver(control, job)),
        ("scaling_events", lambda: scaling_events(control, job)),
        ("dq", lambda: dq(control, job)),
        ("autosize_decisions", lambda: decisions(home, job)),
        ("lock", lambda: lock(home, job)),
        ("stores", lambda: stores(home, job)),
        ("observe", lambda: observe(control, home, job)),
    ]
    for name, read in sections:
        try:
            status[name] = read()
        except Exception as e:  # a section's failure is information, not a 500
            status[name] = None
            status["errors"][name] = f"{type(e).__name__}: {e}"
    result: dict[str, Any] = plain(status)
    return result


def model(control: Any, home: Any, job: str) -> dict[str, Any]:
    from pipelines.systems.registry import open_system

    active = control.job_models.active(job)
    inputs = []
    for stream, partitions in sorted(active.partitions().items(), key=lambda kv: str(kv[0])):
        try:
            now = open_system(stream.system, home).describe(stream.stream).partition_count
        except Exception:  # an input we cannot describe here: show what the model saw
            now = None
        inputs.append({"input": str(stream), "partitions": partitions, "partitions_now": now})
    activations = [h for h in control.job_models.history(job) if h["event"] == "activated" and h.get("active")]
    return {
        "version": active.version,
        "latest_version": control.job_models.latest_version(job),
        "factor": active.elasticity_factor,
        "grouper": active.grouper,
        "virtual_tasks": active.task_count,
        "containers": len(active.containers),
        "inputs": inputs,
        "tasks": [str(t.task_name) for t in active.tasks()],
        "activated_at": activations[-1]["created_at"] if activations else None,
        "activation_reason": activations[-1]["reason"] if activations else None,
    }


def driver(control: Any, job: str) -> dict[str, Any]:
    """Whether a driver runs, where, since when (``pipelines.observe.drivers``)."""
    from pipelines.observe.collect import driver_section

    return driver_section(control, control.job_models.active(job))


def scaling_events(control: Any, job: str) -> list[dict[str, Any]]:
    rows = []
    for e in reversed(control.events.history(job)[-EVENTS_SHOWN:]):  # newest first
        details = dict(e.details or {})
        duration = (e.finished_at - e.started_at).total_seconds() if e.finished_at and e.started_at else None
        rows.append(
            {
                "event_id": e.event_id,
                "kind": e.kind,
                "status": e.status,
                "from_version": e.from_version,
                "to_version": e.to_version,
                "from_factor": e.from_factor,
                "to_factor": e.to_factor,
                "started_at": e.started_at,
                "finished_at": e.finished_at,
                "duration_s": duration,
                "mode": details.get("mode"),  # in-place (a live driver switched) or cold (a catch-up run)
                "downtime_s": details.get("downtime_s"),
                "records_replayed": details.get("records_replayed"),
                "caught_up_s": details.get("caught_up_s"),
                "failed_after": details.get("failed_after"),
                "dq": details.get("dq"),
                "reason": details.get("reason"),
            }
        )
    return rows


def dq(control: Any, job: str) -> list[dict[str, Any]]:
    """The latest validated windows, newest first; a window's latest verdict of a check replaces earlier ones."""
    frame = control.dq_results.read(job)
    if frame is None or len(frame) == 0:
        return []
    windows: dict[str, list[dict[str, Any]]] = {}
    for row in frame.to_dict("records"):  # oldest first
        windows.setdefault(row["window"], []).append(row)
    latest = sorted(windows.items(), key=lambda kv: max(r["run_at"] for r in kv[1]), reverse=True)
    result = []
    for window, checks in latest[:DQ_WINDOWS_SHOWN]:
        by_check = {r["check"]: r for r in checks}
        result.append(
            {
                "window": window,
                "run_at": max(r["run_at"] for r in by_check.values()),
                "ok": all(bool(r["success"]) for r in by_check.values()),
                **datadocs.window_fields(by_check.values()),  # the DAG run that produced it
                "checks": [
                    {
                        "check": name,
                        "success": bool(r["success"]),
                        "observed": r["observed"],
                        "checked": r["checked"],
                        "examples": r.get("examples"),
                        **datadocs.check_fields(r),  # its Data Docs page, its first offenders
                    }
                    for name, r in by_check.items()
                ],
            }
        )
    return result


def decisions(home: Any, job: str) -> list[dict[str, Any]]:
    """The latest autosize decisions, newest first (none until ``scale_evaluation`` has looked at the job).

    A decision that acts carries what became of the rescale it triggered (``autosize_runs``): its run, and
    applied, skipped or failed with the run's note; ``outcome`` is None when Airflow's database cannot be read
    from here (the page then says nothing rather than "not triggered").
    """
    from pipelines.control.decisions import read_decisions
    from pipelines.core.autosize import DOWN, UP

    rows = [{k: v for k, v in r.items() if k != "job"} for r in reversed(read_decisions(home, job)[-DECISIONS_SHOWN:])]
    acting = {autosize_runs.run_id(job, r["decided_at"]): r for r in rows if r["action"] in (UP, DOWN)}
    try:
        found: dict[str, tuple[str, str | None]] | None = autosize_runs.runs(acting)
    except Exception:  # not inside Airflow (a test, a script): the decisions alone
        found = None
    for run_id, row in acting.items():
        row.update(run_id=run_id, run_url=datadocs.run_url("elastic_rescale", run_id), outcome=None, why=None)
        if found is not None:
            row.update(autosize_runs.outcome(*found.get(run_id, (None, None))))
    return rows


def lock(home: Any, job: str) -> dict[str, Any]:
    from pipelines.control.locks import ScalingLock

    state = ScalingLock(home).state(job)
    if state is None:
        return {"held": False, "status": "never taken"}
    return {
        "held": bool(state.held),
        "status": state.status,
        "owner": state.owner,
        "operation": state.operation,
        "expires_at": state.expires_at,
        "since": state.at,
        "describe": state.describe() if state.held else None,
    }


def stores(home: Any, job: str) -> list[dict[str, Any]] | None:
    """The job's adjunct stores (position, size, version, validity, last bootstrap); None when it has none."""
    from pipelines.adjunct.inspect import describe_stores

    return describe_stores(home, job) or None


def observe(control: Any, home: Any, job: str) -> dict[str, Any]:
    """Plots, virtual tasks and inputs over the last ``OBSERVE_MINUTES`` (the driver is its own section)."""
    from pipelines.observe.collect import observe as observe_job

    return observe_job(home, job, control=control, minutes=OBSERVE_MINUTES, driver=False)
