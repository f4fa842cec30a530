"""Moving a job past records its input no longer holds: the operator's explicit step after a read failed on them.

Kafka's retention (or ``kafka-delete-records``), or the embedded log's
``stream trim --lose-unread``, may remove records a stopped job had not read
yet. The job's next read then fails, naming the partition
and offset, and commits nothing, as Spark's ``failOnDataLoss`` does by
default; every later run fails the same way. ``skip_lost`` is the way on: it
plans a new model version at the same factor whose start checkpoints are
moved up to each such partition's earliest position, and activates it under
the scaling lock, with the skipped ranges and their record count in the
model history's reason. A new version, not new rows for the failed one:
Spark's own checkpoint of a version would replay its failed batch. Never
done by itself: a loss is the operator's to accept (docs/systems/kafka.md,
"Reads").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipelines import planning
from pipelines.control import ControlPlane, Home
from pipelines.errors import ConfigError
from pipelines.jobs.config import job_config
from pipelines.systems.base import Position, SupportsRelayout
from pipelines.systems.registry import JobSystems


@dataclass(frozen=True)
class Gap:
    """Records of one partition between the job's slowest checkpoint and what the partition still holds."""

    stream: str
    partition: int
    checkpoint: Position
    earliest: Position
    records: int | None  # at most this many (Kafka: an offset difference); None if the system cannot count


def find_gaps(home: Home, job: str) -> list[Gap]:
    """Every partition of the active model whose slowest key bucket stands before the partition's earliest."""
    control = ControlPlane(home)
    model = control.job_models.active(job)
    config = job_config(model)
    latest = control.checkpoints.latest(job, model.version)
    gaps: list[Gap] = []
    with JobSystems(home, config.systems) as systems:
        for stream in config.inputs:
            system = systems.of(stream.system)
            if isinstance(system, SupportsRelayout):
                raise ConfigError(
                    f"skip-lost is not available for {stream.system} input {stream.stream!r}: its partitions are "
                    "slots over shards, laid out again by the system, not ranges to move past"
                )
            floors: dict[int, Position] = {}
            for ssp, position in latest.offsets.items():
                if ssp.system_stream != stream:
                    continue
                slowest = floors.get(ssp.partition)
                if slowest is None or system.position_key(position) < system.position_key(slowest):
                    floors[ssp.partition] = position
            partitions = system.describe(stream.stream).partitions
            for p, position in sorted(floors.items()):
                part = partitions.get(p)
                if part is not None and system.position_key(position) < system.position_key(part.earliest):
                    count = system.records_between(stream.stream, p, position, part.earliest)
                    gaps.append(Gap(stream.stream, p, position, part.earliest, count))
    return gaps


def skip_lost(home: Home, job: str, *, dry_run: bool = False) -> tuple[list[Gap], int | None]:
    """The gaps, and the new active version that starts past them (``None``: nothing to skip, or a dry run)."""
    from pipelines.operations.scaling.readings import last_heartbeat

    gaps = find_gaps(home, job)
    if not gaps or dry_run:
        return gaps, None
    control = ControlPlane(home)
    beat = last_heartbeat(control, job)
    if beat is not None and beat["live"]:
        raise ConfigError(
            f"job {job!r} has a live driver on {beat['host']} (pid {beat['pid']}); stop it first "
            f"('pipelines stop {job}'), then skip the lost records"
        )
    plan = planning.plan_next(home, job)
    earliest = {(g.stream, g.partition): g.earliest for g in gaps}
    floors = {
        ssp: earliest[ssp.stream, ssp.partition]
        for ssp in plan.start.offsets
        if (ssp.stream, ssp.partition) in earliest
    }
    with JobSystems(home, job_config(plan.model).systems) as systems:
        plan = replace(plan, start=planning.at_least(systems, plan.start, floors))
    counted = [g.records for g in gaps]
    total = "an unknown number of" if None in counted else f"at most {sum(c or 0 for c in counted)}"
    ranges = ", ".join(f"{g.stream}/{g.partition} [{g.checkpoint}, {g.earliest})" for g in gaps)
    reason = f"skip lost records: {total} records deleted before the job read them ({ranges})"
    planning.save(home, plan, reason, activate=True)
    return gaps, plan.model.version
