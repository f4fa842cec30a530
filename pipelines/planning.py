"""Planning a job model version: the one place versions are made and where each starts reading.

Every version of a job comes from here, whoever asks: job creation (the
first version), a rescale, the absorption of a partition expansion or a
reshard (the repartition watch), the CLI's ``model plan --save``, and the
driver's carry-forward when it switches models in place. A plan is a model
and its start checkpoints; saving one takes the job's scaling lock (re-entered
by an operation that already holds it), so no version is ever saved beside a
running scaling operation.

Start positions are migrated per input stream with that stream's own position
order (``migrate_checkpoints``), so a job reading two systems never compares
one system's positions with another's order; partitions new to the model
start at their earliest position.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from math import gcd, lcm
from typing import Any

from pipelines.control import ControlPlane, Home
from pipelines.control.checkpoints import INITIAL_BATCH
from pipelines.control.job_models import check_reason
from pipelines.control.locks import ScalingInProgressError, ScalingLock, process_owner
from pipelines.core.checkpoints import CheckpointMap, migrate_checkpoints, partition_floor
from pipelines.core.groupers import plan_job_model
from pipelines.core.hashing import validate_factor
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.core.start import EARLIEST, LATEST, start_time_ms
from pipelines.errors import ConfigError
from pipelines.faults import crash_point
from pipelines.jobs.config import CONFIG_KEY, JobConfig, check_config_change, job_config
from pipelines.systems.base import Position, SupportsRelayout, SupportsStartAtTime
from pipelines.systems.identity import IDENTITY_KEY, check_same_streams, identities, recorded
from pipelines.systems.registry import JobSystems


@dataclass(frozen=True)
class VersionPlan:
    """A model version not yet saved, and where it starts reading."""

    previous: JobModel | None
    model: JobModel
    start: CheckpointMap

    @property
    def changes(self) -> bool:
        """Whether the model differs from the one in force in anything that matters to the running job."""
        p = self.previous
        return (
            p is None
            or self.model.task_count != p.task_count
            or self.model.partitions() != p.partitions()
            or self.model.grouper != p.grouper
            or self.model.elasticity_factor != p.elasticity_factor
            or self.model.config.get(CONFIG_KEY) != p.config.get(CONFIG_KEY)
        )

    def summary(self) -> dict[str, Any]:
        return {
            "job": self.model.job_name,
            "from_version": self.previous.version if self.previous else None,
            "to_version": self.model.version,
            "from_factor": self.previous.elasticity_factor if self.previous else None,
            "to_factor": self.model.elasticity_factor,
            "grouper": self.model.grouper,
            "partitions": {str(s): n for s, n in self.model.partitions().items()},
            "virtual_tasks": self.model.task_count,
            "checkpoints": len(self.start.offsets),
            "changes": self.changes,
        }


def _model_config(systems: JobSystems, config: JobConfig) -> dict[str, str]:
    """What a model keeps of its planning: the job's configuration and its inputs' ids (``systems.identity``)."""
    ids = identities(systems.of, config.inputs)
    return {CONFIG_KEY: json.dumps(config.to_dict(), sort_keys=True), IDENTITY_KEY: json.dumps(ids, sort_keys=True)}


def plan_first(home: Home, config: JobConfig) -> VersionPlan:
    """Version 1 of a new job over its inputs' partitions now, every partition from its earliest position, or with
    ``start: latest`` from its end now, or with a time from its first record at or after it (``core.start``)."""
    with JobSystems(home, config.systems) as systems:
        model = plan_job_model(
            config.name,
            1,
            partition_counts(systems, config),
            factor=config.elasticity_factor,
            grouper=config.grouper,
            containers=config.containers,
            config=_model_config(systems, config),
        )
        return VersionPlan(None, model, start_positions(systems, None, model, start=config.start))


def plan_next(
    home: Home,
    job: str,
    *,
    factor: object | None = None,
    grouper: str | None = None,
    containers: int | None = None,
    config: dict[str, Any] | None = None,
) -> VersionPlan:
    """Version N+1 of ``job`` over its inputs' partitions now: a new factor, grouper or container count, or a new
    configuration (``config``: the job's YAML, a new function or options, columns added to its state or output).

    ``None`` keeps what the active model has. Partition growth is absorbed by
    the grouper (SEP-5's fixed task number keeps keys with their tasks); a
    shrink or, for that grouper, a growth to a non-multiple is refused. A new
    configuration is checked against the one in force (``check_config_change``).
    """
    control = ControlPlane(home)
    current = control.job_models.active(job)
    active = job_config(current)
    raw = active.to_dict()
    if config is not None:  # the YAML's factor, grouper and containers were the job's at its create: kept as now
        check_config_change(active, JobConfig.from_dict(config, origin=f"the new configuration of job {job}"))
        raw = {**config, "grouper": current.grouper, "containers": active.containers}
    raw["elasticity_factor"] = current.elasticity_factor if factor is None else validate_factor(factor)
    if grouper is not None:
        raw["grouper"] = grouper
    if containers is not None:
        raw["containers"] = containers
    new = JobConfig.from_dict(raw, origin=f"job {job} v{current.version}")
    with JobSystems(home, new.systems) as systems:
        model_config = _model_config(systems, new)
        check_same_streams(
            job,
            current.version,
            recorded(current),
            json.loads(model_config[IDENTITY_KEY]),
            "a new version would carry them over. To read the stream as it is now, create a job for it afresh "
            "(pipelines job create, with its own name and sink)",
        )
        model = plan_job_model(
            job,
            (control.job_models.latest_version(job) or current.version) + 1,
            partition_counts(systems, new),
            factor=new.elasticity_factor,
            grouper=new.grouper,
            containers=new.containers,
            previous=current,
            config=model_config,
            slotted=frozenset(s for s in new.inputs if isinstance(systems.of(s.system), SupportsRelayout)),
        )
        old = control.checkpoints.latest(job, current.version)
        return VersionPlan(current, model, start_positions(systems, old, model))


def replay_estimate(home: Home, plan: VersionPlan) -> int | None:
    """About how many records the plan's model would read again, from the checkpoints in force now.

    A new bucket b' starts at the slowest old bucket b of its partition with
    ``b ≡ b' (mod gcd)``; of the records between that start and where a
    faster b stands, those whose key is in both b and b' were processed
    already. Hashing spreads keys evenly, so that is about one record in
    ``lcm(X, X')`` of them (for any b ≡ b', exactly one residue modulo the
    lcm). None when an input cannot count records between two positions.
    """
    previous = plan.previous
    if previous is None:
        return 0
    old = ControlPlane(home).checkpoints.latest(previous.job_name, previous.version)
    new = plan.start
    g, share = gcd(old.factor, new.factor), lcm(old.factor, new.factor)
    total = 0.0
    with JobSystems(home, job_config(plan.model).systems) as systems:
        for new_ssp, start in new.offsets.items():
            whole, b_new = new_ssp.whole(), new_ssp.key_bucket or 0
            system = systems.of(whole.system)
            for old_ssp, position in old.offsets.items():
                if old_ssp.whole() != whole or ((old_ssp.key_bucket or 0) - b_new) % g:
                    continue
                if system.position_key(position) <= system.position_key(start):
                    continue
                count = system.records_between(whole.stream, whole.partition, start, position)
                if count is None:
                    return None
                total += count / share
    return round(total)


def start_positions(
    systems: JobSystems, old: CheckpointMap | None, model: JobModel, *, start: str = EARLIEST
) -> CheckpointMap:
    """``model``'s start checkpoints from ``old`` (the previous version's latest), stream by stream.

    Each stream is migrated with its own system's position order; a partition
    ``old`` does not cover starts at its earliest position, or as a new job's
    ``start`` says (``latest``: its end now; a time: its first record at or
    after it). A stream of slots over shards (Kinesis) has no end position to
    start from: ``latest`` is the time now there, as KCL's ``LATEST`` reads
    what arrives after the reader starts.
    """
    result: dict[SystemStreamPartition, str] = {}
    wholes = model.whole_ssps()
    at_ms = start_time_ms(start)
    if at_ms is not None and at_ms > time.time() * 1000:
        raise ConfigError(f"start: {start} is in the future; a job starts from a time its inputs have reached")
    for stream in sorted({s.system_stream for s in wholes}):
        system = systems.of(stream.system)
        since = at_ms
        if start == LATEST and isinstance(system, SupportsRelayout):  # a slot's end is a time, not a position
            since = int(time.time() * 1000)
        if since is not None and not isinstance(system, SupportsStartAtTime):
            raise ConfigError(
                f"start: {start} is not available for {stream.system} input {stream.stream!r}: its records carry no "
                "time a reader can start from; use start: earliest or start: latest"
            )
        mine = [s for s in wholes if s.system_stream == stream]
        previous = CheckpointMap(
            old.factor if old else 1,
            {s: o for s, o in (old.offsets.items() if old else ()) if s.system_stream == stream},
        )
        covered, wanted = {s.partition for s in previous.offsets}, {s.partition for s in mine}
        relaid = isinstance(system, SupportsRelayout) and bool(covered) and len(covered) != len(wanted)
        earliest: dict[SystemStreamPartition, str] = {}
        if not relaid and wanted - covered:
            # Only a partition the old map does not cover starts at its first position: a rescale of the same
            # partitions asks its system nothing (an in-place switch's carry-forward runs in its downtime).
            meta = system.describe(stream.stream)
            first = {p: part.end if start == LATEST else part.earliest for p, part in meta.partitions.items()}
            if since is not None and isinstance(system, SupportsStartAtTime):  # refused above otherwise
                first.update({p: o for p, o in system.positions_at(stream.stream, since).items() if p in first})
            earliest = {SystemStreamPartition(stream.system, stream.stream, p): o for p, o in first.items()}
        if relaid and isinstance(system, SupportsRelayout):  # (the check again: for the type checker)
            # Partitions that are slots over a changing set of shards (Kinesis, after a reshard): the system
            # places every shard's state on the new slot count (one slot per open shard), so nothing is read
            # twice or skipped; every key bucket of a slot starts where the slot's slowest bucket stood.
            floors = partition_floor(previous.offsets.items(), system.position_key)
            placed = system.relayout(stream.stream, {s.partition: o for s, o in floors.items()}, len(wanted))
            earliest = {SystemStreamPartition(stream.system, stream.stream, p): o for p, o in placed.items()}
            previous = CheckpointMap(previous.factor, {})
        migrated = migrate_checkpoints(previous, model.elasticity_factor, mine, earliest, system.position_key)
        result.update(migrated.offsets)
    return CheckpointMap(model.elasticity_factor, result)


def save(home: Home, plan: VersionPlan, reason: str, *, owner: str | None = None, activate: bool = False) -> None:
    """Save the version and its start checkpoints (then activate it if asked), holding the job's scaling lock.

    An operation that holds the lock passes its ``owner`` and re-enters it; a
    caller without one (job creation, ``model plan --save``) takes the lock
    for the save and releases it after, or is refused while another
    operation holds it.
    """
    job = plan.model.job_name
    check_reason(plan.model, reason)  # a refused save takes no lock and leaves no row
    lock = ScalingLock(home)
    mine = owner is None
    if owner is None:
        owner = process_owner("plan")
        lock.acquire(job, owner, f"save model v{plan.model.version} of {job}")
    else:
        # Re-acquiring would renew the operation's lease under another name; only check it is still ours.
        state = lock.state(job)
        if state is None or not state.held or state.owner != owner:
            held = state.describe() if state is not None else "nobody holds it"
            raise ScalingInProgressError(
                f"cannot save model v{plan.model.version} of {job!r}: {owner} does not hold its scaling lock ({held})"
            )
    try:
        control = ControlPlane(home)
        control.job_models.save(plan.model, reason=reason)
        crash_point("mid_migration")
        control.checkpoints.write(job, plan.model.version, plan.start, batch_id=INITIAL_BATCH)
        if activate:
            control.job_models.activate(job, plan.model.version, reason=reason)
    finally:
        if mine:
            lock.release(job, owner)


def at_least(
    systems: JobSystems, start: CheckpointMap, floors: Mapping[SystemStreamPartition, Position]
) -> CheckpointMap:
    """``start`` with each key bucket's position raised to its floor where the floor is later in its system's order.

    Slotted streams (Kinesis) are left as they are: their positions are laid out again by their system and have
    no such order.
    """
    raised: dict[SystemStreamPartition, Position] = {}
    for ssp, position in start.offsets.items():
        system, floor = systems.of(ssp.system), floors.get(ssp)
        if floor is not None and not isinstance(system, SupportsRelayout):
            position = max(position, floor, key=system.position_key)
        raised[ssp] = position
    return CheckpointMap(start.factor, raised)


def carry_forward(home: Home, previous: JobModel, model: JobModel) -> bool:
    """Re-migrate ``model``'s start checkpoints once ``previous`` has stopped for good.

    A rescale of a continuously running job migrates while the old query may
    still commit batches; the driver calls this once the old query is stopped
    and before the new one starts, so the new model starts exactly where the
    old one ended (no record read twice). Checkpoints only move forward, so
    the refreshed start is never behind the one the rescale wrote, and a
    model that has already committed a batch is left alone. True if written.
    """
    control = ControlPlane(home)
    if (control.checkpoints.latest_batch(model.job_name, model.version) or INITIAL_BATCH) > INITIAL_BATCH:
        return False
    written = control.checkpoints.latest(model.job_name, model.version)
    with JobSystems(home, job_config(model).systems) as systems:
        old = control.checkpoints.latest(previous.job_name, previous.version)
        fresh = start_positions(systems, old, model)
        # Never behind what was written: a start moved up on purpose (``operations.lost``: past records the input
        # deleted) stays where it is.
        fresh = at_least(systems, fresh, written.offsets)
    if fresh == written:
        return False
    control.checkpoints.write(model.job_name, model.version, fresh, batch_id=INITIAL_BATCH)
    return True


def carry_forward_on_start(home: Home, model: JobModel) -> int | None:
    """Before a driver starts ``model``: carry its predecessor's final checkpoints forward if it has one.

    Returns the predecessor's version when something was carried.
    """
    control = ControlPlane(home)
    previous = control.job_models.previous_active_version(model.job_name, model.version)
    if previous is None or previous >= model.version:
        return None
    if carry_forward(home, control.job_models.get(model.job_name, previous), model):
        return previous
    return None


def partition_counts(systems: JobSystems, config: JobConfig) -> dict[SystemStream, int]:
    """Each input's partition count now, as its system describes it."""
    return {s: systems.of(s.system).describe(s.stream).partition_count for s in config.inputs}
