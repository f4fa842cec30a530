"""Starting a scaling operation: the cheap checks, the dry-run plan, the job's lock and the operation's event.

``begin`` takes the job's scaling lock and first settles what earlier
operations left unfinished: an event whose model N+1 became active is closed
as recovered, any other as rolled back (N+1 stays an inert planned row). A
retry by the same owner (the same Airflow run) resumes its own event instead.
``apply_plan`` is the one-shot form for jobs that are not running. See
docs/design.md, "Rescaling is a model switch, not a redeploy".
"""

from __future__ import annotations

from typing import Any

from pipelines import planning
from pipelines.control import ControlPlane, Home
from pipelines.control.locks import DEFAULT_TTL_S, ScalingLock, dead_process_owner, process_owner
from pipelines.control.scaling_events import EventStatus, ScalingEvent
from pipelines.core.groupers import grouper_by_name
from pipelines.core.hashing import validate_factor
from pipelines.core.limits import check_reason
from pipelines.operations.scaling.operation import (
    RESCALE,
    Say,
    ScalingOperation,
    ScalingRequest,
    print_line,
)


def validate(home: Home, request: ScalingRequest) -> None:
    """The cheap checks, before any planning: a reason, a valid factor, a known job and grouper."""
    check_reason(request.reason)  # stored with the new model, shown on one line: no NUL, newline or 200,000 chars
    if request.factor is not None:
        validate_factor(request.factor)
    if request.grouper is not None:
        grouper_by_name(request.grouper)
    ControlPlane(home).job_models.active(request.job)  # an unknown job: UnknownJobError, naming the known jobs


def plan(home: Home, request: ScalingRequest) -> dict[str, Any]:
    """Validate the request and plan model N+1 without writing anything; the dry run stops here."""
    validate(home, request)
    summary = plan_version(home, request).summary()
    summary.update(kind=request.kind, reason=request.reason)
    return summary


def plan_version(home: Home, request: ScalingRequest) -> planning.VersionPlan:
    return planning.plan_next(home, request.job, factor=request.factor, grouper=request.grouper, config=request.config)


def begin(
    home: Home,
    request: ScalingRequest,
    owner: str,
    *,
    lock_wait_s: float = 0.0,
    ttl_s: float = DEFAULT_TTL_S,
    say: Say = print_line,
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
    version = plan_version(home, request)
    assert version.previous is not None
    event = ScalingEvent.start(
        request.job,
        request.kind,
        at=control.clock.now(),
        from_version=version.previous.version,
        from_factor=version.previous.elasticity_factor,
        to_factor=version.model.elasticity_factor,
        details={
            "reason": request.reason,
            "owner": owner,
            **version.summary(),
            **({"config": request.config} if request.config is not None else {}),
        },
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
        config=event.details.get("config"),
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


def settle_abandoned(home: Home, job: str, say: Say = print_line) -> list[str]:
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


def apply_plan(home: Home, version: planning.VersionPlan, reason: str, kind: str = RESCALE) -> ScalingEvent:
    """Save and activate a planned version in one go, as a scaling event, with no driver to coordinate.

    For jobs that are not running (tests, scripted maintenance): the steps
    without stop, restart and catch-up. The event is the window
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
