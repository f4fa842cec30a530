"""Starting a scaling operation: the cheap checks, the dry-run plan, the job's lock and the operation's event.

``begin`` takes the job's scaling lock and first settles what earlier
operations left unfinished: an event whose model N+1 became active is closed
as recovered, any other as rolled back (N+1 stays an inert planned row). A
retry by the same owner (the same Airflow run) resumes its own event instead.
``apply_plan`` is the one-shot form for jobs that are not running. See
docs/design.md, "Rescaling is a model switch, not a redeploy".

Operations on one job queue on its lock, and one that waited may find
another model active than the one it was decided on: ``replan`` makes it
again against the model in force (an expansion with that model's grouper,
an autosizer's factor by asking the autosizer again, an operator's factor as
asked), or ends it with ``ScalingSkipped`` and the reason. See
docs/design.md, "Operations on one job queue on its lock".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pipelines import planning
from pipelines.control import ControlPlane, Home
from pipelines.control.locks import DEFAULT_TTL_S, ScalingLock, dead_process_owner, process_owner
from pipelines.control.scaling_events import EventStatus, ScalingEvent
from pipelines.core.autosize import DOWN, UP
from pipelines.core.groupers import expansion_grouper, grouper_by_name
from pipelines.core.hashing import validate_factor
from pipelines.core.limits import check_reason
from pipelines.operations.scaling.operation import (
    EXPANSION,
    RESCALE,
    Say,
    ScalingOperation,
    ScalingRequest,
    ScalingSkipped,
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
    poll_s: float = 2.0,
    ttl_s: float = DEFAULT_TTL_S,
    say: Say = print_line,
) -> ScalingOperation:
    """Take the job's scaling lock, settle unfinished earlier operations, and open (or resume) this one's event."""
    lock = ScalingLock(home)
    what = f"{request.kind} of {request.job} to factor {request.factor if request.factor is not None else '(same)'}"
    state = lock.wait_acquire(request.job, owner, what, ttl_s=ttl_s, wait_s=lock_wait_s, poll_s=poll_s, progress=say)
    try:
        return _open_event(home, request, owner, ttl_s, what, say)
    except ScalingSkipped:
        lock.release(request.job, owner)  # nothing of this operation exists (a skip opens no event), even on a retry
        raise
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
    request = replan(home, request, owner, say)
    version = plan_version(home, request)
    assert version.previous is not None
    if not version.changes:
        raise ScalingSkipped(
            f"job {request.job} already runs this model (v{version.previous.version}, factor "
            f"{version.previous.elasticity_factor}): nothing to do"
        )
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


def replan(home: Home, request: ScalingRequest, owner: str, say: Say = print_line) -> ScalingRequest:
    """The request made again against the model active now, if it was decided on another; ``ScalingSkipped`` if
    what it was decided for no longer holds.

    Called with the job's lock held, so nothing moves the model under it. An
    expansion takes the grouper of the model in force (``plan_next`` finds the
    partitions itself); an autosizer's decision was drawn from the metrics of
    tasks that no longer run, so the autosizer is asked again (its cooldown
    after the switch that just happened usually holds it); an operator's factor
    is what they asked for, whatever ran before.
    """
    active = ControlPlane(home).job_models.active(request.job)
    if request.decided_on is None or request.decided_on == active.version:
        return request
    moved = f"the {request.kind} of {request.job} was decided on v{request.decided_on}; v{active.version} is active now"
    if request.kind == EXPANSION:
        grouper = expansion_grouper(active.grouper) if request.grouper is not None else None
        say(f"{moved}: the expansion is planned on v{active.version}")
        return replace(request, grouper=grouper, decided_on=active.version)
    if request.autosized:
        from pipelines.operations.autosize import evaluate

        decision = evaluate(home, request.job, owner=owner)
        asked = f"{moved}, and the autosizer asked again says {decision.action}: {'; '.join(decision.reasons)}"
        if decision.action not in (UP, DOWN):
            raise ScalingSkipped(f"{asked}; factor {request.factor} was not applied")
        say(f"{asked}: factor {decision.factor} is planned on v{active.version}")
        reason = decision.reason_for(f"autosize {decision.action}, asked again on v{active.version}")
        return replace(request, factor=decision.factor, reason=reason, decided_on=active.version)
    say(f"{moved}: factor {request.factor} is planned on v{active.version}")
    return replace(request, decided_on=active.version)


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
