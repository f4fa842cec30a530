"""Whether a job's driver runs, where and since when, and whether it should: from the ``drivers`` table.

Pure: the drivers' latest rows, the job's trigger and the time in; a JSON-able
view out, the same for the page, its API and ``pipelines status``. The time is
the store's (``Drivers.now``), the clock the drivers stamp their rows with, so
a heartbeat's age does not depend on the clock of the host that shows it.

A continuous job should always have a driver beating (``keep_continuous_jobs_running``
in ``elastic_microbatch`` relaunches it); one whose newest driver is silent
(killed: no stop row, its heartbeat stale), stopped or failed is **down**, and
the view says so with what its last driver said. An available-now job runs
on a schedule and is idle between runs: no driver is its normal state.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pipelines.control.drivers import ENDED, STALE_AFTER_S, DriverRow

SHOWN = 5


def driver_view(drivers: Sequence[DriverRow], trigger: str | None, now: datetime) -> dict[str, Any]:
    """``{"running", "should_run", "down", "summary", "detail", "drivers": [...]}``; ``drivers`` newest first."""
    live = [d for d in drivers if d.live(now)]
    should_run = trigger == "continuous"
    newest = drivers[0] if drivers else None
    if live:
        d = live[0]
        detail = (
            f"on {d.host} (pid {d.pid}) since {_time(d.started_at)}; last heartbeat {_age(d, now)} ago, "
            f"last batch {_batch(d)}"
        )
        if len(live) > 1:
            detail += f"; {len(live)} drivers beating (a second one is refused by `pipelines run` on one host)"
        summary = f"running {detail}"
    elif newest is None:
        detail = summary = "never ran in this home" + (": a continuous job should have a driver" if should_run else "")
    else:
        detail = _ending(newest, now)
        if not should_run:
            detail += " (available-now: it runs when elastic_microbatch launches it)"
        summary = f"not running: {detail}"
    return {
        "running": bool(live),
        "should_run": should_run,
        "down": should_run and not live,
        "trigger": trigger,
        "summary": summary,
        "detail": detail,  # the summary without its state, which the page's pill says
        "drivers": [_row(d, now) for d in drivers[:SHOWN]],
    }


def _row(d: DriverRow, now: datetime) -> dict[str, Any]:
    return {
        "driver_id": d.driver_id,
        "host": d.host,
        "pid": d.pid,
        "app_id": d.app_id,
        "master": d.master,
        "started_at": d.started_at.isoformat(),
        "state": d.state if d.state in ENDED else ("running" if d.live(now) else "silent"),
        "last_heartbeat": d.at.isoformat(),
        "heartbeat_age_s": round(d.age_s(now), 1),
        "model_version": d.model_version,
        "last_batch": d.batch_id,
        "detail": d.detail,
    }


def _ending(d: DriverRow, now: datetime) -> str:
    where = f"its last driver, pid {d.pid} on {d.host}"
    if d.state == "stopped":
        return f"{where}, stopped cleanly at {_time(d.at)} after batch {_batch(d)}"
    if d.state == "failed":
        return f"{where}, failed at {_time(d.at)}: {d.detail}"
    return (
        f"{where}, went silent {_age(d, now)} ago without stopping (killed or its host lost; heartbeats stop "
        f"counting after {STALE_AFTER_S:.0f} s); last batch {_batch(d)}"
    )


def _batch(d: DriverRow) -> str:
    if d.batch_id is None or d.batch_id < 0:
        return "none yet" + (f" (v{d.model_version})" if d.model_version is not None else "")
    return f"{d.batch_id} of v{d.model_version}"


def _time(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(d: DriverRow, now: datetime) -> str:
    s = d.age_s(now)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
