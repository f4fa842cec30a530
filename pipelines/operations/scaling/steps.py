"""The steps of a scaling operation that change the job: stop, migrate, activate, verify, finish; and all in order.

    plan → begin (lock, recover) → stop → migrate → activate → restart → catch up → verify → finish

Each step is a plain function of the home and the operation (JSON, so it
travels as an Airflow XCom), so the DAGs' tasks stay one line each and the
CLI and the demo run the very same code. Every step first checks what the
control plane already holds and resumes from there, so a retried task does
nothing twice. Model N+1 and its start checkpoints are saved (``migrate``)
before N+1 is activated (``activate``), so a crash leaves N or N+1 fully in
force. Why, and how it holds across hosts: docs/design.md, "Rescaling is a
model switch, not a redeploy".
"""

from __future__ import annotations

from typing import Any

from pipelines import planning
from pipelines.control import ControlPlane, Home
from pipelines.control.dq_results import DagRunRef
from pipelines.control.drivers import ENDED
from pipelines.control.locks import ScalingLock, process_owner
from pipelines.control.scaling_events import EventStatus
from pipelines.errors import PipelinesError
from pipelines.faults import crash_point
from pipelines.operations.scaling.operation import (
    Mode,
    Say,
    ScalingOperation,
    ScalingRequest,
    event_of,
    move_status,
    print_line,
    renew,
)
from pipelines.operations.scaling.readings import default_sequence, end_positions, last_heartbeat, measure
from pipelines.operations.scaling.start import begin, plan_version
from pipelines.operations.scaling.switch import CatchUp, restart, wait_caught_up


def stop(home: Home, op: ScalingOperation, say: Say = print_line) -> dict[str, Any]:
    """Decide how the job switches: in place (a live driver) or by a catch-up run (no live driver).

    A live driver is not stopped here: it stops its query at a batch boundary
    itself when N+1 is activated, and restarts in the same Spark application.
    A driver process this host started that is not live (starting, stuck) is
    asked to stop and, failing that, killed, so it cannot commit batches of
    model N after the migration. A silent driver of another host is not
    signalled (its pid means nothing here): it is taken for dead, as its
    heartbeat says, and named, so an operator can look at its host.
    """
    renew(home, op)
    from pipelines.runtime import launcher

    control = ControlPlane(home)
    beat = last_heartbeat(control, op.job)
    if beat is not None and beat["live"]:
        say(
            f"driver of {op.job} is live on v{beat['model_version']} on {beat['host']} "
            f"({beat['age_s']:.1f}s since its heartbeat, by the store's clock)"
        )
        result = {"mode": Mode.IN_PLACE, "driver_version": beat["model_version"]}
    else:
        if (
            launcher.running_pid(home, op.job) is not None
            and launcher.stop(home, op.job, timeout=60.0) is launcher.StopOutcome.REQUESTED
        ):
            launcher.kill(home, op.job)
            say(f"driver of {op.job} did not stop within 60s: killed")
        if beat is not None and beat["state"] not in ENDED and not beat["on_this_host"]:
            say(
                f"the last driver of {op.job}, pid {beat['pid']} on host {beat['host']}, went silent "
                f"{beat['age_s']:.0f}s ago without stopping: taken for dead (if it is stuck, stop it on its host)"
            )
        say(f"no live driver of {op.job}: v{op.from_version} is stopped; the new model gets a catch-up run")
        result = {"mode": Mode.COLD, "driver_version": None}
    move_status(control, op, EventStatus.STOPPED, **result)
    return result


def migrate(home: Home, op: ScalingOperation, say: Say = print_line) -> dict[str, Any]:
    """Save model N+1 with its start checkpoints migrated from N's latest ones; not yet active."""
    renew(home, op)
    control = ControlPlane(home)
    event = event_of(control, op)
    if event.to_version is not None:
        say(f"v{event.to_version} was already saved with its start checkpoints: resuming")
        return {"to_version": event.to_version}
    version = plan_version(home, op.request())
    assert version.previous is not None
    if version.previous.version != op.from_version:
        raise PipelinesError(
            f"job {op.job} moved from v{op.from_version} to v{version.previous.version} during this operation; "
            "nothing was changed by it: plan again"
        )
    planning.save(home, version, op.reason, owner=op.owner)
    move_status(control, op, EventStatus.MIGRATED, to_version=version.model.version)
    say(
        f"saved v{version.model.version}: factor {version.model.elasticity_factor}, {version.model.task_count} "
        f"virtual tasks, {len(version.start.offsets)} start checkpoints migrated from v{op.from_version}"
    )
    crash_point("after_migrate")
    return {"to_version": version.model.version}


def activate(home: Home, op: ScalingOperation, say: Say = print_line) -> dict[str, Any]:
    """Put N+1 in force and note the inputs' end positions at that moment: the catch-up target."""
    renew(home, op)
    control = ControlPlane(home)
    event = event_of(control, op)
    if event.to_version is None:
        raise PipelinesError(f"scaling event {op.event_id} has no migrated model to activate; run migrate first")
    if control.job_models.active_version(op.job) != event.to_version:
        control.job_models.activate(op.job, event.to_version, reason=op.reason)
        say(f"v{event.to_version} of {op.job} is active")
    else:
        say(f"v{event.to_version} of {op.job} was already active: resuming")
    target = event.details.get("catch_up_target") or end_positions(home, op.job)
    activated_at = event.details.get("activated_at") or control.clock.now_s()  # the store's time
    move_status(control, op, EventStatus.ACTIVATED, activated_at=activated_at, catch_up_target=target)
    return {"to_version": event.to_version, "catch_up_target": target}


def verify(
    home: Home,
    op: ScalingOperation,
    *,
    sequence: str | None = None,
    dag_run: DagRunRef | None = None,
    say: Say = print_line,
) -> dict[str, Any]:
    """Data-quality checks over the scaling window (GX suites, dq_results, Data Docs); fails on a FAIL.

    ``dag_run``: the Airflow run verifying, recorded with the verdicts so the UI links to it.
    """
    from pipelines.quality.report import run_quality

    renew(home, op)
    control = ControlPlane(home)
    sequence = sequence or default_sequence(home, op.job)
    report = run_quality(home, op.job, op.event_id, sequence=sequence, dag_run=dag_run)
    say(report.summary())
    verdict = "pass" if report.success else "fail"
    v = report.verdict
    counts = {
        "records": v.records_expected,
        "lost": v.lost,
        "duplicates": v.duplicates,
        "out_of_order": v.order_violations,
        "misrouted": v.misrouted,
        "dead_letters": v.dead_letters,
    }
    for state in v.states:  # each state's check: its keys judged and those whose row disagrees with the input
        counts[f"state:{state.state}"] = state.wrong
        counts[f"state:{state.state}:keys"] = state.keys
    move_status(
        control,
        op,
        EventStatus.VERIFIED if report.success else EventStatus.DQ_FAILED,
        dq=verdict,
        dq_counts=counts,
        docs=str(report.docs_index),
    )
    if not report.success:
        raise PipelinesError(f"data-quality checks FAILED after scaling {op.job}: {report.verdict.summary()}")
    return {"dq": verdict, "docs": str(report.docs_index)}


def finish(home: Home, op: ScalingOperation, say: Say = print_line) -> dict[str, Any]:
    """Close the event with its figures (downtime, records replayed, DQ verdict) and release the lock.

    Runs whatever happened before it (Airflow ``all_done``): an operation that
    failed before activation is closed as rolled back, one that failed after
    it keeps N+1 in force and is closed as failed, with the step it reached.
    """
    try:
        control = ControlPlane(home)
        event = event_of(control, op)
        try:
            figures = measure(home, event)
        except Exception as e:  # figures are a report: never a reason to keep the job locked
            figures = {"dq": event.details.get("dq", "not run"), "measure_error": f"{type(e).__name__}: {e}"}
        active = control.job_models.active_version(op.job)
        status: EventStatus
        if event.status in (EventStatus.VERIFIED, EventStatus.DQ_FAILED):
            status = event.status
        elif event.to_version is not None and active == event.to_version:
            status = EventStatus.FAILED
            figures["failed_after"] = str(event.status)
        else:
            status = EventStatus.ROLLED_BACK
            figures["failed_after"] = str(event.status)
        if event.finished_at is None:
            control.events.record(event.finish(status, at=control.clock.now(), **figures))
    finally:
        ScalingLock(home).release(op.job, op.owner)
    say(f"scaling event {event.event_id} {status}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    return {"status": str(status), **figures}


def run_all(
    home: Home,
    request: ScalingRequest,
    *,
    owner: str | None = None,
    sequence: str | None = None,
    master: str | None = None,
    lock_wait_s: float = 0.0,
    catch_up_timeout_s: float = 600.0,
    catch_up: CatchUp | None = None,
    say: Say = print_line,
) -> dict[str, Any]:
    """Every step in order, in this process: the CLI's ``pipelines rescale`` and the demo."""
    owner = owner or process_owner("cli")
    if catch_up is None:  # a catch-up run may be needed: a dead Spark master is refused before the lock is taken
        from pipelines.runtime.launcher import default_master
        from pipelines.runtime.lifetime import check_master

        check_master(master or default_master())
    op = begin(home, request, owner, lock_wait_s=lock_wait_s, say=say)
    try:
        mode = stop(home, op, say)["mode"]
        migrate(home, op, say)
        activate(home, op, say)
        restart(home, op, mode, master=master, catch_up=catch_up, say=say)
        wait_caught_up(home, op, timeout_s=catch_up_timeout_s, say=say)
        verify(home, op, sequence=sequence, say=say)
    finally:
        result = finish(home, op, say)
    return {**op.to_dict(), **result}
