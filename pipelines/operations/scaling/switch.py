"""How a job gets onto its new model: a live driver's in-place switch, or one catch-up run, then the catch-up.

A live driver switches inside its Spark application when N+1 is activated;
``restart`` only waits for it. A job with no live driver (or one whose driver
died before switching) gets one available-now run of N+1, so the new model
has processed the backlog and the scaling window can be verified. Catching up
means N+1's committed checkpoints reached the inputs' ends at activation.

The waits are one look at the control plane each (``switch_state``,
``catch_up_state``), so two callers share them: the CLI's ``restart`` and
``wait_caught_up`` poll them in this process, and the Airflow tasks hand the
same looks to a trigger on the triggerer and give their worker slot back
while it polls (``pipelines_airflow.triggers``). Whatever a look finds is
acted on by the functions around them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pipelines.control import ControlPlane, Home
from pipelines.control.scaling_events import EventStatus
from pipelines.errors import PipelinesError, StreamError, one_line
from pipelines.faults import crash_point
from pipelines.operations.scaling.operation import (
    Mode,
    Say,
    ScalingOperation,
    Target,
    event_of,
    move_status,
    print_line,
    renew,
)
from pipelines.operations.scaling.readings import lag_behind, last_heartbeat, metric_times

CatchUp = Callable[[Home, str], None]
"""Runs a job once with available-now; the default is a spark-submit driver (``pipelines run --available-now``)."""

SWITCH_POLL_S = 0.5
CATCH_UP_POLL_S = 1.0


class Switch(StrEnum):
    """Where a live driver's in-place switch to a new model stands, at one look at the control plane."""

    SWITCHED = "switched"  # the driver started a query on the new model
    DRIVER_GONE = "driver gone"  # its heartbeat went stale before it switched: nothing will switch
    WAITING = "waiting"


def switch_state(home: Home, job: str, version: int) -> Switch:
    """One look: has the job's live driver started ``version`` in its Spark application yet?"""
    control = ControlPlane(home)
    if metric_times(control, job, version, ("query_started",)):
        return Switch.SWITCHED
    beat = last_heartbeat(control, job)
    # The driver that looked live has died (a kill -9 leaves a fresh heartbeat and no stop behind) or stopped:
    # nothing will switch. A switching driver is live throughout: it beats, and writes no end between its two
    # queries.
    if beat is None or not beat["live"]:
        return Switch.DRIVER_GONE
    return Switch.WAITING


def catch_up_state(home: Home, job: str, version: int, target: Target) -> tuple[bool, int | None]:
    """One look: whether ``version`` reached the activation point ``target``, and the records left if countable."""
    return lag_behind(home, job, version, target)


# ---------------------------------------------------------------------------------------------------- restart


def begin_restart(home: Home, op: ScalingOperation) -> int:
    """The restart step's entry: renew the lease; the version the job must now run."""
    renew(home, op)
    crash_point("during_switch")
    version = event_of(ControlPlane(home), op).to_version
    if version is None:
        raise PipelinesError(f"scaling event {op.event_id} has no migrated model to restart on; run migrate first")
    return version


def restart_timed_out(op: ScalingOperation, version: int, timeout_s: float) -> PipelinesError:
    return PipelinesError(
        f"the driver of {op.job} did not start v{version} within {timeout_s:.0f}s; v{version} is active and "
        "will be used by the next run (pipelines run), check the driver's log under <home>/run/"
    )


def driver_gone(op: ScalingOperation, version: int, say: Say = print_line) -> None:
    say(f"the driver of {op.job} stopped beating before it switched: v{version} gets a catch-up run")


def switched(op: ScalingOperation, version: int, say: Say = print_line) -> dict[str, Any]:
    say(f"the driver switched to v{version} in its Spark application")
    return {"restarted": "in-place"}


def restart(
    home: Home,
    op: ScalingOperation,
    mode: Mode | str,
    *,
    master: str | None = None,
    timeout_s: float = 300.0,
    catch_up: CatchUp | None = None,
    say: Say = print_line,
) -> dict[str, Any]:
    """Get N+1 running: wait for a live driver's in-place switch, or run N+1 once with available-now."""
    version = begin_restart(home, op)
    if Mode(mode) is Mode.IN_PLACE:
        deadline = time.monotonic() + timeout_s
        while (state := switch_state(home, op.job, version)) is Switch.WAITING:
            if time.monotonic() > deadline:
                raise restart_timed_out(op, version, timeout_s)
            time.sleep(SWITCH_POLL_S)
        if state is Switch.SWITCHED:
            return switched(op, version, say)
        driver_gone(op, version, say)
    return catch_up_run(home, op, version, master=master, catch_up=catch_up, say=say)


def catch_up_run(
    home: Home,
    op: ScalingOperation,
    version: int,
    *,
    master: str | None = None,
    catch_up: CatchUp | None = None,
    say: Say = print_line,
) -> dict[str, Any]:
    """Run N+1 once with available-now, in the foreground: work, not a wait, so it holds its caller until done.

    A stopped job that had read its inputs to their ends needs no run: N+1's
    migrated checkpoints already stand at the activation point, and a Spark
    application started to find nothing would only cost its start-up (a
    rescale took 19.9 s with it, 9.2 s without; README "Downtime"). The next
    ``pipelines run`` starts N+1 from them.
    """
    if _already_caught_up(home, op, version, say):
        say(f"v{version} of {op.job} starts at the inputs' ends as of its activation: nothing to catch up, no run")
        return {"restarted": "none: nothing to catch up"}
    if catch_up is not None:
        say(f"running v{version} of {op.job} once with available-now")
        catch_up(home, op.job)
        return {"restarted": "catch-up run"}
    from pipelines.runtime import launcher

    master = master or launcher.default_master()
    say(f"running v{version} of {op.job} once with available-now on {master} (spark-submit)")
    code = launcher.run(home, op.job, available_now=True, master=master, detach=False)
    if code != 0:
        cause = launcher.failure(home, op.job)
        raise PipelinesError(
            f"the catch-up run of {op.job} v{version} " + (f"failed: {cause}" if cause else f"exited with code {code}")
        )
    return {"restarted": "catch-up run"}


def _already_caught_up(home: Home, op: ScalingOperation, version: int, say: Say) -> bool:
    """Whether the catch-up run can be skipped. Only a saving: when the look fails (a broker or a stream's store
    that does not answer) the run goes ahead, and waits out an outage of its inputs as any run does."""
    control = ControlPlane(home)
    target = event_of(control, op).details.get("catch_up_target") or {}
    if not target or control.checkpoints.latest_batch(op.job, version) is None:
        return False  # no activation point recorded, or no checkpoints to compare: run, as before
    try:
        return catch_up_state(home, op.job, version, target)[0]
    except Exception as error:
        if not input_outage(error):  # a bug stays a bug; an input or store not answering only costs the saving
            raise
        say(
            f"could not tell whether v{version} of {op.job} is at its inputs' ends ({one_line(str(error))[:300]}): "
            "it gets its catch-up run"
        )
        return False


# ---------------------------------------------------------------------------------------------------- catch up


def begin_catch_up(home: Home, op: ScalingOperation) -> tuple[int, Target]:
    """The catch-up step's entry: renew the lease; the new version and the activation point it must reach."""
    renew(home, op)
    event = event_of(ControlPlane(home), op)
    if event.to_version is None:
        raise PipelinesError(f"scaling event {op.event_id} has no activated model to catch up; run activate first")
    return event.to_version, event.details.get("catch_up_target") or {}


def caught_up(home: Home, op: ScalingOperation, say: Say = print_line) -> dict[str, Any]:
    """Record that N+1 reached its activation point, with how long after the activation it did."""
    control = ControlPlane(home)
    event = event_of(control, op)
    now = control.clock.now_s()  # the store's clock, like activated_at: one clock across hosts
    caught = now - float(event.details.get("activated_at") or now)
    say(f"v{event.to_version} caught up with the input as of its activation ({caught:.1f}s after it)")
    move_status(control, op, EventStatus.CAUGHT_UP, caught_up_s=round(caught, 3))
    return {"caught_up_s": round(caught, 3)}


def behind_text(behind: int | None) -> str:
    return "an unknown number of" if behind is None else str(behind)


def input_outage(error: BaseException) -> bool:
    """A failure a look at the inputs or the home is waited past: an input that does not answer (the sources wait
    out the same ``StreamError``) or the home's store not answering (``storage.objects.unanswered``)."""
    from pipelines.storage.objects import unanswered

    return isinstance(error, StreamError) or unanswered(error)


def catch_up_timed_out(op: ScalingOperation, version: int, behind: int | None, timeout_s: float) -> PipelinesError:
    return PipelinesError(
        f"v{version} of {op.job} is still {behind_text(behind)} records behind the activation point after "
        f"{timeout_s:.0f}s; the model stays active, the job is running late"
    )


def wait_caught_up(
    home: Home, op: ScalingOperation, *, timeout_s: float = 600.0, say: Say = print_line
) -> dict[str, Any]:
    """Wait until N+1's committed checkpoints reach the end positions the inputs had at activation."""
    version, target = begin_catch_up(home, op)
    deadline = time.monotonic() + timeout_s
    last_say = 0.0
    missed: BaseException | None = None  # the look that failed last, while looks fail
    while True:
        try:
            done, behind = catch_up_state(home, op.job, version, target)
        except Exception as error:
            if not input_outage(error):
                raise
            if missed is None:  # a broker or the home's store that did not answer: a look missed, not an end
                say(f"v{version} of {op.job}: its progress cannot be looked at ({one_line(str(error))[:300]}); waiting")
            missed, done, behind = error, False, None
        else:
            if missed is not None:
                say(f"v{version} of {op.job}: its progress can be looked at again")
            missed = None
        if done:
            return caught_up(home, op, say)
        now = time.monotonic()
        if now > deadline:
            timed_out = catch_up_timed_out(op, version, behind, timeout_s)
            if missed is None:
                raise timed_out
            raise PipelinesError(f"{timed_out}; its last looks failed: {one_line(str(missed))[:300]}") from missed
        if missed is None and now - last_say > 10:
            say(f"v{version} of {op.job}: {behind_text(behind)} records behind the activation point")
            last_say = now
        time.sleep(CATCH_UP_POLL_S)
