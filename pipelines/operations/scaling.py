"""A scaling operation, one resumable step at a time: what ``elastic_rescale`` and ``repartition_watch`` run.

    plan → begin (lock, recover) → stop → migrate → activate → restart → catch up → verify → finish

Each step is a plain function of the home and the operation's ``op`` dict
(JSON, so it travels as an Airflow XCom), so the DAGs' tasks stay one line
each and the CLI and the demo run the very same code. Every step first checks
what the control plane already holds and resumes from there, so a retried
task does nothing twice, and none trusts Airflow's memory: the state is the
scaling event (its latest status row) and the job models' activation history.

Crash safety. Model N+1 and its start checkpoints are written (``migrate``)
before N+1 is activated (``activate``), and readers trust only the active
model's checkpoints, so a crash at any point leaves N or N+1 fully in force.
The next operation on the job (``begin``) settles an unfinished earlier one:
if its N+1 became active the event is closed as recovered, otherwise as
rolled back (N+1 stays an inert planned row in the history). A retry by the
same owner (the same Airflow run) resumes its own event instead.

How a running job switches. A continuous driver that is alive (a fresh
heartbeat in the ``drivers`` table) notices the activation, stops its query
at a batch boundary, carries N's final checkpoints forward and starts N+1 in
the same Spark application: ``stop`` only confirms the driver is live, and
``restart`` waits for its switch. A job with no live driver is given one
available-now run of N+1 (``restart``), so the new model has processed the
backlog and the scaling window can be verified; it is left stopped, as it was.

Across hosts. The steps may run on different Airflow workers and the driver
on yet another host, so nothing here compares one host's clock with
another's: a driver's liveness is its last row's age on the store's clock,
the lock's lease likewise, and the catch-up time is measured between two
readings of the store's clock. A driver is stopped through the stop request
it polls, on whichever host it runs; only a driver this host started (its pid
file names this host) is ever signalled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from pipelines import planning
from pipelines.control import ControlPlane, Home
from pipelines.control.dq_results import DagRunRef
from pipelines.control.drivers import ENDED, RECENT_LIVE_S, STALE_AFTER_S
from pipelines.control.locks import DEFAULT_TTL_S, ScalingLock, dead_process_owner, process_owner
from pipelines.control.scaling_events import EventStatus, ScalingEvent
from pipelines.core.groupers import expansion_grouper, grouper_by_name
from pipelines.core.hashing import validate_factor
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import ConfigError, PipelinesError
from pipelines.faults import crash_point
from pipelines.jobs.config import job_config
from pipelines.jobs.output_schema import parse_output_schema
from pipelines.systems.registry import JobSystems

LIVE_AFTER_S = STALE_AFTER_S  # a driver whose last heartbeat is older than this is not live (it beats every 10 s)
RESCALE = "rescale"
EXPANSION = "partition expansion"
Say = Callable[[str], None]
Target = dict[str, dict[str, str]]
"""End positions per input (``"system/stream"``) and partition (``"0"``): what a new model must reach."""


class Mode(StrEnum):
    """How a job switches to the new model."""

    IN_PLACE = "in-place"  # a live driver switches inside its Spark application
    COLD = "cold"  # no live driver: the new model gets one available-now catch-up run


@dataclass(frozen=True)
class ScalingRequest:
    """What a user (or the repartition watch, or the autosizer) asks for."""

    job: str
    factor: int | None  # None: keep the current factor (absorbing a partition expansion)
    reason: str
    kind: str = RESCALE
    grouper: str | None = None  # None: keep the job's grouper

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ScalingRequest:
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})


@dataclass(frozen=True)
class ScalingOperation:
    """One scaling operation in flight; travels between Airflow tasks as JSON (``to_dict``, ``of``).

    Everything else about it (its status, the version it made, the catch-up
    target) is in its scaling event, which every step reads afresh.
    """

    job: str
    event_id: str
    owner: str  # who holds the job's lock, stable across retries (e.g. the Airflow run)
    kind: str
    from_version: int
    to_factor: int
    grouper: str | None
    reason: str
    ttl_s: float = DEFAULT_TTL_S

    def request(self) -> ScalingRequest:
        return ScalingRequest(self.job, self.to_factor, self.reason, self.kind, self.grouper)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, value: ScalingOperation | Mapping[str, Any]) -> ScalingOperation:
        """The operation from itself or from its JSON form (an XCom)."""
        if isinstance(value, ScalingOperation):
            return value
        try:
            return cls(**{f.name: value[f.name] for f in fields(cls) if f.name in value})
        except TypeError as e:
            raise PipelinesError(f"not a scaling operation: {dict(value)!r:.300} ({e})") from None


def _print(message: str) -> None:
    print(message, flush=True)


# ---------------------------------------------------------------------------------------------------- plan


def validate(home: Home, request: ScalingRequest) -> None:
    """The cheap checks, before any planning: a reason, a valid factor, a known job and grouper."""
    if not isinstance(request.reason, str) or not request.reason.strip():
        raise ConfigError("a scaling operation needs a reason (it is recorded with the new model)")
    if request.factor is not None:
        validate_factor(request.factor)
    if request.grouper is not None:
        grouper_by_name(request.grouper)
    ControlPlane(home).job_models.active(request.job)  # an unknown job: UnknownJobError, naming the known jobs


def plan(home: Home, request: ScalingRequest) -> dict[str, Any]:
    """Validate the request and plan model N+1 without writing anything; the dry run stops here."""
    validate(home, request)
    summary = _plan_version(home, request).summary()
    summary.update(kind=request.kind, reason=request.reason)
    return summary


def _plan_version(home: Home, request: ScalingRequest) -> planning.VersionPlan:
    return planning.plan_next(home, request.job, factor=request.factor, grouper=request.grouper)


# ---------------------------------------------------------------------------------------------------- begin


def begin(
    home: Home,
    request: ScalingRequest,
    owner: str,
    *,
    lock_wait_s: float = 0.0,
    ttl_s: float = DEFAULT_TTL_S,
    say: Say = _print,
) -> ScalingOperation:
    """Take the job's scaling lock, settle unfinished earlier operations, and open (or resume) this one's event."""
    lock = ScalingLock(home)
    what = f"{request.kind} of {request.job} to factor {request.factor if request.factor is not None else '(same)'}"
    state = lock.wait_acquire(request.job, owner, what, ttl_s=ttl_s, wait_s=lock_wait_s, progress=say)
    try:
        return _open_event(home, request, owner, ttl_s, what, say)
    except BaseException:
        # Nothing of this operation exists yet (no event, no model): let go, so a refused request does not
        # block the job for a lease. A lock this owner already held (a retry) is kept for its own event.
        if state.status != "renewed":
            lock.release(request.job, owner)
        raise


def _open_event(home: Home, request: ScalingRequest, owner: str, ttl_s: float, what: str, say: Say) -> ScalingOperation:
    control = ControlPlane(home)
    mine = None
    for event in control.events.history(request.job):
        if event.finished_at is not None:
            continue
        if event.details.get("owner") == owner:
            mine = event
        else:
            _settle(control, event, owner, say)
    if mine is not None:
        say(f"resuming scaling event {mine.event_id} ({mine.status}) of job {request.job}")
        return _operation(mine, owner, ttl_s)
    version = _plan_version(home, request)
    assert version.previous is not None
    event = ScalingEvent.start(
        request.job,
        request.kind,
        at=control.clock.now(),
        from_version=version.previous.version,
        from_factor=version.previous.elasticity_factor,
        to_factor=version.model.elasticity_factor,
        details={"reason": request.reason, "owner": owner, **version.summary()},
    )
    control.events.record(event)
    say(f"scaling event {event.event_id}: {what} (v{version.previous.version} → v{version.model.version})")
    return _operation(event, owner, ttl_s)


def _operation(event: ScalingEvent, owner: str, ttl_s: float) -> ScalingOperation:
    assert event.from_version is not None and event.to_factor is not None
    return ScalingOperation(
        job=event.job,
        event_id=event.event_id,
        owner=owner,
        kind=event.kind,
        from_version=event.from_version,
        to_factor=event.to_factor,
        grouper=event.details.get("grouper"),
        reason=event.details.get("reason", event.kind),
        ttl_s=ttl_s,
    )


def _settle(control: ControlPlane, event: ScalingEvent, owner: str, say: Say) -> None:
    """Close an operation that died half way: recovered if its model is in force, rolled back otherwise."""
    active = control.job_models.active_version(event.job)
    if event.to_version is not None and active == event.to_version:
        status = EventStatus.RECOVERED
        note = f"v{event.to_version} was activated before the operation stopped; it stays in force"
    else:
        status = EventStatus.ROLLED_BACK
        note = f"v{active} stays in force" + (
            f"; v{event.to_version} was planned but never activated" if event.to_version is not None else ""
        )
    control.events.record(event.finish(status, at=control.clock.now(), settled_by=owner, settled=note))
    say(f"earlier scaling event {event.event_id} ({event.status}) {status}: {note}")


def settle_abandoned(home: Home, job: str, say: Say = _print) -> list[str]:
    """Close what a killed operation left behind when nothing else will: its lock and its unfinished events.

    The next operation settles them itself, but a request that finds nothing
    to change (the killed one had already activated its model) starts no
    operation, and would leave the job looking mid-scale, its lock held for a
    lease. Only a holder known dead (a CLI process of this host that is gone)
    is settled here; a live one, or an Airflow run whose teardown settles it,
    is left alone. Returns the ids of the events settled.
    """
    lock = ScalingLock(home)
    state = lock.state(job)
    if state is None or not state.held or not dead_process_owner(state.owner):
        return []
    owner = process_owner("cli")
    lock.acquire(job, owner, f"settle what {state.owner} left of {job}")
    try:
        control = ControlPlane(home)
        abandoned = [e for e in control.events.history(job) if e.finished_at is None]
        for event in abandoned:
            _settle(control, event, owner, say)
        return [e.event_id for e in abandoned]
    finally:
        lock.release(job, owner)


# ---------------------------------------------------------------------------------------------------- steps


def stop(home: Home, op: ScalingOperation, say: Say = _print) -> dict[str, Any]:
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
        if launcher.running_pid(home, op.job) is not None and not launcher.stop(home, op.job, timeout=60.0):
            launcher.kill(home, op.job)
            say(f"driver of {op.job} did not stop within 60s: killed")
        if beat is not None and beat["state"] not in ENDED and not beat["on_this_host"]:
            say(
                f"the last driver of {op.job}, pid {beat['pid']} on host {beat['host']}, went silent "
                f"{beat['age_s']:.0f}s ago without stopping: taken for dead (if it is stuck, stop it on its host)"
            )
        say(f"no live driver of {op.job}: v{op.from_version} is stopped; the new model gets a catch-up run")
        result = {"mode": Mode.COLD, "driver_version": None}
    _status(control, op, EventStatus.STOPPED, **result)
    return result


def migrate(home: Home, op: ScalingOperation, say: Say = _print) -> dict[str, Any]:
    """Save model N+1 with its start checkpoints migrated from N's latest ones; not yet active."""
    renew(home, op)
    control = ControlPlane(home)
    event = _event(control, op)
    if event.to_version is not None:
        say(f"v{event.to_version} was already saved with its start checkpoints: resuming")
        return {"to_version": event.to_version}
    version = _plan_version(home, op.request())
    assert version.previous is not None
    if version.previous.version != op.from_version:
        raise PipelinesError(
            f"job {op.job} moved from v{op.from_version} to v{version.previous.version} during this operation; "
            "nothing was changed by it: plan again"
        )
    planning.save(home, version, op.reason, owner=op.owner)
    _status(control, op, EventStatus.MIGRATED, to_version=version.model.version)
    say(
        f"saved v{version.model.version}: factor {version.model.elasticity_factor}, {version.model.task_count} "
        f"virtual tasks, {len(version.start.offsets)} start checkpoints migrated from v{op.from_version}"
    )
    crash_point("after_migrate")
    return {"to_version": version.model.version}


def activate(home: Home, op: ScalingOperation, say: Say = _print) -> dict[str, Any]:
    """Put N+1 in force and note the inputs' end positions at that moment: the catch-up target."""
    renew(home, op)
    control = ControlPlane(home)
    event = _event(control, op)
    if event.to_version is None:
        raise PipelinesError(f"scaling event {op.event_id} has no migrated model to activate; run migrate first")
    if control.job_models.active_version(op.job) != event.to_version:
        control.job_models.activate(op.job, event.to_version, reason=op.reason)
        say(f"v{event.to_version} of {op.job} is active")
    else:
        say(f"v{event.to_version} of {op.job} was already active: resuming")
    target = event.details.get("catch_up_target") or end_positions(home, op.job)
    activated_at = event.details.get("activated_at") or control.clock.now_s()  # the store's time
    _status(control, op, EventStatus.ACTIVATED, activated_at=activated_at, catch_up_target=target)
    return {"to_version": event.to_version, "catch_up_target": target}


CatchUp = Callable[[Home, str], None]
"""Runs a job once with available-now; the default is a spark-submit driver (``pipelines run --available-now``)."""

SWITCH_POLL_S = 0.5
CATCH_UP_POLL_S = 1.0


class Switch(StrEnum):
    """Where a live driver's in-place switch to a new model stands, at one look at the control plane."""

    SWITCHED = "switched"  # the driver started a query on the new model
    DRIVER_GONE = "driver gone"  # its heartbeat went stale before it switched: nothing will switch
    WAITING = "waiting"


# The waits below are one look at the control plane each (``switch_state``, ``catch_up_state``), so two callers
# share them: the CLI's ``restart`` and ``wait_caught_up`` poll them in this process, and the Airflow tasks hand
# the same looks to a trigger on the triggerer and give their worker slot back while it polls
# (``pipelines_airflow.triggers``). Whatever a look finds is acted on by the step functions around them.


def switch_state(home: Home, job: str, version: int) -> Switch:
    """One look: has the job's live driver started ``version`` in its Spark application yet?"""
    control = ControlPlane(home)
    if _metric_times(control, job, version, ("query_started",)):
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


def begin_restart(home: Home, op: ScalingOperation) -> int:
    """The restart step's entry: renew the lease; the version the job must now run."""
    renew(home, op)
    crash_point("during_switch")
    version = _event(ControlPlane(home), op).to_version
    if version is None:
        raise PipelinesError(f"scaling event {op.event_id} has no migrated model to restart on; run migrate first")
    return version


def restart_timed_out(op: ScalingOperation, version: int, timeout_s: float) -> PipelinesError:
    return PipelinesError(
        f"the driver of {op.job} did not start v{version} within {timeout_s:.0f}s; v{version} is active and "
        "will be used by the next run (pipelines run), check the driver's log under <home>/run/"
    )


def driver_gone(op: ScalingOperation, version: int, say: Say = _print) -> None:
    say(f"the driver of {op.job} stopped beating before it switched: v{version} gets a catch-up run")


def switched(op: ScalingOperation, version: int, say: Say = _print) -> dict[str, Any]:
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
    say: Say = _print,
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
    say: Say = _print,
) -> dict[str, Any]:
    """Run N+1 once with available-now, in the foreground: work, not a wait, so it holds its caller until done."""
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


def begin_catch_up(home: Home, op: ScalingOperation) -> tuple[int, Target]:
    """The catch-up step's entry: renew the lease; the new version and the activation point it must reach."""
    renew(home, op)
    event = _event(ControlPlane(home), op)
    if event.to_version is None:
        raise PipelinesError(f"scaling event {op.event_id} has no activated model to catch up; run activate first")
    return event.to_version, event.details.get("catch_up_target") or {}


def caught_up(home: Home, op: ScalingOperation, say: Say = _print) -> dict[str, Any]:
    """Record that N+1 reached its activation point, with how long after the activation it did."""
    control = ControlPlane(home)
    event = _event(control, op)
    now = control.clock.now_s()  # the store's clock, like activated_at: one clock across hosts
    caught = now - float(event.details.get("activated_at") or now)
    say(f"v{event.to_version} caught up with the input as of its activation ({caught:.1f}s after it)")
    _status(control, op, EventStatus.CAUGHT_UP, caught_up_s=round(caught, 3))
    return {"caught_up_s": round(caught, 3)}


def behind_text(behind: int | None) -> str:
    return "an unknown number of" if behind is None else str(behind)


def catch_up_timed_out(op: ScalingOperation, version: int, behind: int | None, timeout_s: float) -> PipelinesError:
    return PipelinesError(
        f"v{version} of {op.job} is still {behind_text(behind)} records behind the activation point after "
        f"{timeout_s:.0f}s; the model stays active, the job is running late"
    )


def wait_caught_up(home: Home, op: ScalingOperation, *, timeout_s: float = 600.0, say: Say = _print) -> dict[str, Any]:
    """Wait until N+1's committed checkpoints reach the end positions the inputs had at activation."""
    version, target = begin_catch_up(home, op)
    deadline = time.monotonic() + timeout_s
    last_say = 0.0
    while True:
        done, behind = catch_up_state(home, op.job, version, target)
        if done:
            return caught_up(home, op, say)
        now = time.monotonic()
        if now > deadline:
            raise catch_up_timed_out(op, version, behind, timeout_s)
        if now - last_say > 10:
            say(f"v{version} of {op.job}: {behind_text(behind)} records behind the activation point")
            last_say = now
        time.sleep(CATCH_UP_POLL_S)


def verify(
    home: Home,
    op: ScalingOperation,
    *,
    sequence: str | None = None,
    dag_run: DagRunRef | None = None,
    say: Say = _print,
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
    _status(
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


def finish(home: Home, op: ScalingOperation, say: Say = _print) -> dict[str, Any]:
    """Close the event with its figures (downtime, records replayed, DQ verdict) and release the lock.

    Runs whatever happened before it (Airflow ``all_done``): an operation that
    failed before activation is closed as rolled back, one that failed after
    it keeps N+1 in force and is closed as failed, with the step it reached.
    """
    try:
        control = ControlPlane(home)
        event = _event(control, op)
        try:
            figures = measure(home, event)
        except Exception as e:  # figures are a report: never a reason to keep the job locked
            figures = {"dq": event.details.get("dq", "not run"), "measure_error": f"{type(e).__name__}: {e}"}
        active = control.job_models.active_version(op.job)
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
    say: Say = _print,
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


def apply_plan(home: Home, version: planning.VersionPlan, reason: str, kind: str = RESCALE) -> ScalingEvent:
    """Save and activate a planned version in one go, as a scaling event, with no driver to coordinate.

    For jobs that are not running (tests, scripted maintenance): the steps
    above without stop, restart and catch-up. The event is the window
    ``pipelines verify --event`` checks.
    """
    assert version.previous is not None
    control = ControlPlane(home)
    event = ScalingEvent.start(
        version.model.job_name,
        kind,
        at=control.clock.now(),
        from_version=version.previous.version,
        to_version=version.model.version,
        from_factor=version.previous.elasticity_factor,
        to_factor=version.model.elasticity_factor,
        details={"reason": reason, **version.summary()},
    )
    control.events.record(event)
    planning.save(home, version, reason, activate=True)
    done = event.finish(EventStatus.ACTIVATED, at=control.clock.now())
    control.events.record(done)
    return done


# ---------------------------------------------------------------------------------------------------- figures


def measure(home: Home, event: ScalingEvent) -> dict[str, Any]:
    """Downtime (in-place switches), records replayed, and the DQ verdict of one event, from the control plane."""
    control = ControlPlane(home)
    figures: dict[str, Any] = {"dq": event.details.get("dq", "not run")}
    if event.to_version is None:
        return figures
    if event.details.get("mode") == Mode.IN_PLACE:
        stopped = _metric_times(control, event.job, event.from_version, ("query_stopped",))
        resumed = _metric_times(control, event.job, event.to_version, ("first_progress",)) or _metric_times(
            control, event.job, event.to_version, ("query_started",)
        )
        if stopped and resumed:
            figures["downtime_s"] = round(min(resumed) - max(s for s in stopped if s <= min(resumed)), 3)
    else:
        figures["downtime_s"] = None  # no driver was running: nothing was down because of the rescale
    figures["records_replayed"] = records_replayed(home, event.job, event.from_version, event.to_version)
    if "caught_up_s" in event.details:
        figures["caught_up_s"] = event.details["caught_up_s"]
    return figures


def records_replayed(home: Home, job: str, old: int | None, new: int) -> int | None:
    """Records N+1 starts behind where N had committed, over all partitions: records processed twice.

    None when N has no checkpoints or an input system cannot count records
    between two positions (Kinesis): then it is unknown, not zero.
    """
    if old is None:
        return None
    control = ControlPlane(home)
    try:
        old_latest = control.checkpoints.latest(job, old).offsets.items()
    except PipelinesError:
        return None
    with _systems(home, job) as systems:
        final = systems.floors(old_latest)
        start = systems.floors(control.checkpoints.start(job, new).items())
        total = 0
        for ssp, position in start.items():
            if ssp not in final:
                continue
            system = systems.of(ssp.system)
            if system.position_key(position) >= system.position_key(final[ssp]):
                continue
            count = system.records_between(ssp.stream, ssp.partition, position, final[ssp])
            if count is None:
                return None
            total += count
    return total


def end_positions(home: Home, job: str) -> Target:
    """Every input's end position per partition, now: ``{"system/stream": {"0": "1200", ...}}``."""
    config = job_config(ControlPlane(home).job_models.active(job))
    result: Target = {}
    with _systems(home, job) as systems:
        for stream in config.inputs:
            ends = systems.of(stream.system).end_positions(stream.stream)
            result[f"{stream.system}/{stream.stream}"] = {str(p): end for p, end in ends.items()}
    return result


def lag_behind(home: Home, job: str, version: int, target: Target) -> tuple[bool, int | None]:
    """Whether ``version``'s committed checkpoints reached ``target``, and how many records are left if countable."""
    control = ControlPlane(home)
    checkpoints = control.checkpoints.latest(job, version).offsets.items()
    done, behind = True, 0
    with _systems(home, job) as systems:
        committed = systems.floors(checkpoints)
        for stream_key, partitions in target.items():
            system_name, stream = stream_key.split("/", 1)
            system = systems.of(system_name)
            for p, end in partitions.items():
                position = committed.get(SystemStreamPartition(system_name, stream, int(p)))
                if position is None:
                    continue  # a partition this version does not read
                if system.reached(stream, int(p), position, end):
                    continue
                done = False
                count = system.records_between(stream, int(p), position, end)
                behind = None if count is None or behind is None else behind + count
    return done, (0 if done else behind)


def last_heartbeat(control: ControlPlane, job: str) -> dict[str, Any] | None:
    """The job's driver's latest sign of life, from the ``drivers`` table: which driver, its age, whether it is live.

    Live means a driver that has not ended (its registration wrote no stop or
    failure) and whose last row is younger than ``LIVE_AFTER_S`` (it beats
    every 10 s), both times the store's: the driver stamps its rows with the
    store's time and the age is taken against the store's now, so neither
    host's clock counts. A driver that finished an available-now run has
    ended: it is not live, though its last beat is fresh. The live driver if
    there is one, else the one heard from last; None when none ever ran.
    """
    now = control.drivers.now()
    drivers = control.drivers.latest(job, now=now, recent_s=RECENT_LIVE_S)
    if not drivers:
        return None
    live = [d for d in drivers if d.live(now)]
    d = live[0] if live else max(drivers, key=lambda d: d.at)
    return {
        "model_version": d.model_version,
        "age_s": d.age_s(now),
        "live": bool(live),
        "state": d.state,
        "driver_id": d.driver_id,
        "host": d.host,
        "pid": d.pid,
        "on_this_host": d.on_this_host,
    }


def default_sequence(home: Home, job: str) -> str | None:
    """The per-key sequence column that proves order across an expansion: ``seq`` when the job emits one."""
    config = job_config(ControlPlane(home).job_models.active(job))
    return "seq" if "seq" in parse_output_schema(config.output_schema).fieldNames() else None


def expansion_request(job: str, stream: str, before: int, after: int, grouper: str) -> ScalingRequest:
    """What the repartition watch asks for: same factor, keys kept with their tasks (SEP-5), task count kept."""
    return ScalingRequest(
        job,
        None,
        f"input {stream} expanded from {before} to {after} partitions",
        EXPANSION,
        expansion_grouper(grouper),
    )


def reshard_request(job: str, stream: str, before: int, after: int) -> ScalingRequest:
    """What the repartition watch asks for after a Kinesis reshard: same factor and grouper, one slot per shard."""
    return ScalingRequest(job, None, f"input {stream} resharded from {before} to {after} open shards", EXPANSION, None)


# ---------------------------------------------------------------------------------------------------- helpers


def _systems(home: Home, job: str) -> JobSystems:
    return JobSystems(home, job_config(ControlPlane(home).job_models.active(job)).systems)


def renew(home: Home, op: ScalingOperation) -> None:
    """Every step renews the lease: a long operation keeps its lock, a dead one loses it after ``ttl_s``.

    A step that waits away from its worker (an Airflow task deferred to the triggerer) renews it again when
    it resumes.
    """
    ScalingLock(home).acquire(op.job, op.owner, f"{op.kind} of {op.job}", ttl_s=float(op.ttl_s))


def _event(control: ControlPlane, op: ScalingOperation) -> ScalingEvent:
    for event in control.events.history(op.job):
        if event.event_id == op.event_id:
            return event
    raise PipelinesError(f"scaling event {op.event_id} of job {op.job!r} is not in the control plane")


def _status(
    control: ControlPlane, op: ScalingOperation, status: EventStatus, to_version: int | None = None, **details: Any
) -> None:
    control.events.record(_event(control, op).moved(status, to_version, **details))


def _metric_times(control: ControlPlane, job: str, version: int | None, names: tuple[str, ...]) -> list[float]:
    if version is None:
        return []
    frame = control.metrics.read(job, model_version=version, metrics=names)
    return [float(v) for v in frame["value"]] if len(frame) else []
