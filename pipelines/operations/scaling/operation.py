"""A scaling operation as it travels between steps: the request, the operation, and its scaling event.

The operation is JSON (``to_dict``, ``of``) so it travels as an Airflow XCom;
everything else about it (its status, the version it made, the catch-up
target) is in its scaling event, which every step reads afresh and moves on
(``status``). Every step renews the job's lock first (``renew``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from pipelines.control import ControlPlane, Home
from pipelines.control.locks import DEFAULT_TTL_S, ScalingLock
from pipelines.control.scaling_events import EventStatus, ScalingEvent
from pipelines.core.groupers import expansion_grouper
from pipelines.errors import PipelinesError

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
    config: dict[str, Any] | None = None  # a new configuration (the job's YAML as a mapping); None: keep it
    decided_on: int | None = None  # the active model version the request was made against; None: unknown
    autosized: bool = False  # the factor is the autosizer's decision: asked again if another model is active by then

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
    config: dict[str, Any] | None = None  # the new configuration the operation plans with (None: the job's own)

    def request(self) -> ScalingRequest:
        return ScalingRequest(self.job, self.to_factor, self.reason, self.kind, self.grouper, self.config)

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


class ScalingSkipped(PipelinesError):
    """The operation has nothing left to do, or what it was decided on went away while it waited for the lock.

    Not a failure: the job is as it was (or as the operation that went first
    left it), and the reason says which. Airflow ends the run skipped with the
    reason as its note; the CLI prints it.
    """


def expansion_request(
    job: str, stream: str, before: int, after: int, grouper: str, decided_on: int | None = None
) -> ScalingRequest:
    """What the repartition watch asks for: same factor, keys kept with their tasks (SEP-5), task count kept."""
    return ScalingRequest(
        job,
        None,
        f"input {stream} expanded from {before} to {after} partitions",
        EXPANSION,
        expansion_grouper(grouper),
        decided_on=decided_on,
    )


def reshard_request(job: str, stream: str, before: int, after: int, decided_on: int | None = None) -> ScalingRequest:
    """What the repartition watch asks for after a Kinesis reshard: same factor and grouper, one slot per shard."""
    return ScalingRequest(
        job,
        None,
        f"input {stream} resharded from {before} to {after} open shards",
        EXPANSION,
        None,
        decided_on=decided_on,
    )


def print_line(message: str) -> None:
    """The default ``say``: a line on stdout, flushed (the CLI's and Airflow's task logs)."""
    print(message, flush=True)


def renew(home: Home, op: ScalingOperation) -> None:
    """Every step renews the lease: a long operation keeps its lock, a dead one loses it after ``ttl_s``.

    A step that waits away from its worker (an Airflow task deferred to the triggerer) renews it again when
    it resumes.
    """
    ScalingLock(home).acquire(op.job, op.owner, f"{op.kind} of {op.job}", ttl_s=float(op.ttl_s))


def event_of(control: ControlPlane, op: ScalingOperation) -> ScalingEvent:
    """The operation's scaling event as the control plane holds it now."""
    for event in control.events.history(op.job):
        if event.event_id == op.event_id:
            return event
    raise PipelinesError(f"scaling event {op.event_id} of job {op.job!r} is not in the control plane")


def move_status(
    control: ControlPlane, op: ScalingOperation, status: EventStatus, to_version: int | None = None, **details: Any
) -> None:
    """Record the step the operation reached, with what the step learned, as the event's next status row."""
    control.events.record(event_of(control, op).moved(status, to_version, **details))
