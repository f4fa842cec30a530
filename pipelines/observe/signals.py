"""Each job's signals for ``observe.openmetrics``, read from the home: the active model, the last minute of batches,
the driver's heartbeat, the scaling lock and the last scaling step.

Cheap enough for every scrape (Prometheus' default is every 15 s): the metric
rows of the last ``WINDOW_S`` only, the names ``series.METRICS_READ`` reads, and
no input system is asked (the lag is the one the last batch recorded). A job
that cannot be read is reported as such (``error``) and the others still are.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock
from pipelines.observe.collect import driver_section
from pipelines.observe.openmetrics import JobSignals
from pipelines.observe.series import METRICS_READ, batches, epoch
from pipelines.storage.home import Home

WINDOW_S = 60.0
"""The records-per-second figure is the records of the batches committed in the last minute, over a minute."""
LOOKBACK_S = 900.0
"""How far back the last batch (its lag, its time) is looked for: a job idle for longer shows no lag figure."""


def read_signals(home: Home) -> list[JobSignals]:
    """Every job of the home with an active model, in name order."""
    control = ControlPlane(home)
    result = []
    for job in sorted(control.job_models.jobs()):
        try:
            result.append(job_signals(home, control, job))
        except Exception as e:  # one unreadable job is a signal too, not a failed scrape
            result.append(JobSignals(job, 0, 0, 0, False, False, False, error=f"{type(e).__name__}: {e}"))
    return result


def job_signals(home: Home, control: ControlPlane, job: str, now: float | None = None) -> JobSignals:
    model = control.job_models.active(job)
    now = control.clock.now_s() if now is None else now  # the clock the rows' ``at`` is on: the store's
    frame = control.metrics.read(job, metrics=METRICS_READ, since=datetime.fromtimestamp(now - LOOKBACK_S, UTC))
    points = batches(frame.to_dict("records"))
    latest = points[-1] if points else None
    recent = [p for p in points if p.at >= now - WINDOW_S]
    driver = driver_section(control, model, now)
    lock = ScalingLock(home).state(job)
    switched = [e for e in control.events.history(job) if e.finished_at is not None and "downtime_s" in e.details]
    last = switched[-1] if switched else None
    downtime = last.details.get("downtime_s") if last is not None else None
    return JobSignals(
        job=job,
        model_version=model.version,
        elasticity_factor=model.elasticity_factor,
        virtual_tasks=model.task_count,
        driver_up=bool(driver["running"]),
        driver_expected=bool(driver["should_run"]),
        scaling=lock is not None and lock.held,
        lag_records=latest.lag_records if latest is not None else None,
        lag_seconds=latest.lag_s if latest is not None else None,
        records_per_second=sum(p.records_in for p in recent) / WINDOW_S,
        last_batch_at=latest.at if latest is not None else None,
        last_switch_downtime_s=float(downtime) if isinstance(downtime, int | float) else None,
        last_switch_at=epoch(last.finished_at) if last is not None and last.finished_at is not None else None,
    )
