"""Rescale: a model switch, not a redeploy.

Writes model N+1 with its migrated start checkpoints, then activates it. Only
the active model's checkpoints are trusted, so a crash before the activation
leaves model N fully in force (and its planned successor is simply never
used), and a crash after it leaves N+1 fully in force.

A continuously running driver keeps committing model N's batches until it
notices the activation; it then stops at a batch boundary and calls
``carry_forward`` to re-migrate N+1's start from N's final checkpoints before
it starts N+1, so nothing is read twice. Because the source advances all key
buckets of a partition together, the buckets of a stopped model share one
offset per partition, so the migration's minimum re-reads nothing either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.control.scaling_events import ScalingEvent
from pipelines.core.checkpoints import CheckpointMap, migrate_checkpoints
from pipelines.core.groupers import plan_job_model
from pipelines.core.hashing import validate_factor
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStreamPartition
from pipelines.jobs.registry import CONFIG_KEY, job_config
from pipelines.systems.registry import open_system


@dataclass(frozen=True)
class RescalePlan:
    previous: JobModel
    model: JobModel
    checkpoints: CheckpointMap

    def summary(self) -> dict[str, object]:
        return {
            "job": self.model.job_name,
            "from_version": self.previous.version,
            "to_version": self.model.version,
            "from_factor": self.previous.elasticity_factor,
            "to_factor": self.model.elasticity_factor,
            "partitions": {str(s): n for s, n in self.model.partitions().items()},
            "virtual_tasks": self.model.task_count,
        }


def plan_rescale(home: Home, job: str, factor: object, *, grouper: str | None = None) -> RescalePlan:
    """Model N+1 for ``factor`` over the inputs' current partitions, and its migrated start checkpoints."""
    x = validate_factor(factor)
    control = ControlPlane(home)
    current = control.job_models.active(job)
    config = job_config(current)
    raw = config.to_dict()
    raw["elasticity_factor"] = x
    if grouper is not None:
        raw["grouper"] = grouper
    inputs = {
        stream: open_system(stream.system, home).describe(stream.stream).partition_count for stream in config.inputs
    }
    model = plan_job_model(
        job,
        (control.job_models.latest_version(job) or current.version) + 1,
        inputs,
        factor=x,
        grouper=raw.get("grouper", config.grouper),
        containers=config.containers,
        previous=current,
        config={CONFIG_KEY: json.dumps(raw, sort_keys=True)},
    )
    return RescalePlan(current, model, migrated(home, current, model))


def migrated(home: Home, previous: JobModel, model: JobModel) -> CheckpointMap:
    """``model``'s start checkpoints from ``previous``'s latest ones; partitions new to ``model`` start earliest."""
    earliest: dict[SystemStreamPartition, str] = {}
    offset_key = int
    for stream in {s.system_stream for s in model.whole_ssps()}:
        system = open_system(stream.system, home)
        offset_key = system.offset_key
        for p, part in system.describe(stream.stream).partitions.items():
            earliest[SystemStreamPartition(stream.system, stream.stream, p)] = part.earliest
    old = ControlPlane(home).checkpoints.latest(previous.job_name, previous.version)
    return migrate_checkpoints(old, model.elasticity_factor, model.whole_ssps(), earliest, offset_key)


def carry_forward(home: Home, previous: JobModel, model: JobModel) -> bool:
    """Re-migrate ``model``'s start checkpoints after ``previous`` has stopped for good.

    A rescale of a continuously running job migrates while the old query may
    still commit batches; the driver calls this once the old query is stopped
    and before the new one starts, so the new model starts exactly where the
    old one ended (no record read twice). Checkpoints only move forward, so
    the refreshed start is never behind the one the rescale wrote, and a
    model that has already committed a batch is left alone. True if written.
    """
    control = ControlPlane(home)
    if (control.checkpoints.latest_batch(model.job_name, model.version) or -1) >= 0:
        return False
    fresh = migrated(home, previous, model)
    if fresh == control.checkpoints.latest(model.job_name, model.version):
        return False
    control.checkpoints.write(model.job_name, model.version, fresh, batch_id=-1)
    return True


def apply_rescale(home: Home, plan: RescalePlan, reason: str, kind: str = "rescale") -> JobModel:
    """Save N+1, write its start checkpoints, then activate it: in this order, so a crash leaves one model in force.

    The step is recorded as a scaling event (started, then finished), which is
    the window data-quality checks verify with ``pipelines verify JOB --event ID``.
    """
    control = ControlPlane(home)
    event = ScalingEvent.start(
        plan.model.job_name,
        kind,
        from_version=plan.previous.version,
        to_version=plan.model.version,
        from_factor=plan.previous.elasticity_factor,
        to_factor=plan.model.elasticity_factor,
        details={"reason": reason, **plan.summary()},
    )
    control.events.record(event)
    control.job_models.save(plan.model, reason=reason)
    control.checkpoints.write(plan.model.job_name, plan.model.version, plan.checkpoints, batch_id=-1)
    control.job_models.activate(plan.model.job_name, plan.model.version, reason=reason)
    control.events.record(event.finish("activated"))
    return plan.model


def rescale(home: Home, job: str, factor: object, reason: str = "rescale") -> JobModel:
    return apply_rescale(home, plan_rescale(home, job, factor), reason)
