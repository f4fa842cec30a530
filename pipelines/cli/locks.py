"""``pipelines lock ...``: a job's scaling lock, who holds it, and the operator's release of a dead holder's."""

from __future__ import annotations

import argparse

from pipelines.cli.output import Output
from pipelines.core.ssp import validate_name
from pipelines.errors import ConfigError
from pipelines.storage.home import Home


def show(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.control.locks import ScalingLock, dead_process_owner

    state = ScalingLock(home).state(validate_name("job", args.job))
    if state is None:
        _require_job(home, args.job)  # a misspelled name is not a free lock
        output.emit({"job": args.job, "status": "never taken", "held": False}, lambda: f"{args.job}: never taken")
        return
    dead = state.held and dead_process_owner(state.owner)
    data = {**{k: str(v) for k, v in vars(state).items()}, "held": state.held, "holder_dead": dead}

    def human() -> str:
        if not state.held:
            return f"{args.job}: free ({state.status} by {state.owner} at {state.at:%Y-%m-%d %H:%M:%S} UTC)"
        note = "; its process is gone, the next operation takes it over" if dead else ""
        return f"{args.job}: {state.describe()}{note}"

    output.emit(data, human)


def release(args: argparse.Namespace, home: Home, output: Output) -> None:
    """Checked in the order an operator needs: the job exists, its lock is held (and by whom), then ``--yes``."""
    from pipelines.control.locks import ScalingLock, process_owner

    job = validate_name("job", args.job)
    lock = ScalingLock(home)
    state = lock.state(job)
    if state is None:
        _require_job(home, job)
    if state is None or not state.held:
        _not_held(job, output)
        return
    if not args.yes:
        raise ConfigError(
            f"{job}'s scaling lock is held: {state.describe()}; releasing it lets a second operation start beside "
            "it: make sure the holder is dead and add --yes"
        )
    released = lock.force_release(job, by=process_owner("cli"))
    if released is None:  # released by its holder since
        _not_held(job, output)
        return
    output.emit(
        {"job": job, "released": released.owner, "operation": released.operation},
        lambda: f"{job}: released the lock {released.owner} held for {released.operation!r}",
    )


def _not_held(job: str, output: Output) -> None:
    output.emit({"job": job, "released": None}, lambda: f"{job}: the lock is not held; nothing to release")


def _require_job(home: Home, job: str) -> None:
    """A lock nobody ever took is only news about a job that exists; any other name is refused, naming the jobs."""
    from pipelines.control import ControlPlane

    models = ControlPlane(home).job_models
    if not models.planned_versions(job):
        raise models.unknown_job(job)
