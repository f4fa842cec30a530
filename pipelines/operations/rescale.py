"""Rescale: a model switch, not a redeploy.

Writes model N+1 with its migrated start checkpoints, then activates it. Only
the active model's checkpoints are trusted, so a crash before the activation
leaves model N fully in force (and its planned successor is simply never
used), and a crash after it leaves N+1 fully in force.

The job must not be advancing model N while its checkpoints are migrated:
callers stop it at a batch boundary first (``pipelines stop``), or run it in
available-now mode between rescales. Because the source advances all key
buckets of a partition together, the buckets of a stopped model share one
offset per partition, so the migration's minimum re-reads nothing in practice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pipelines.control.home import Home
from pipelines.control.tables import ControlPlane
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
    current = control.active_model(job)
    config = job_config(current)
    raw = config.to_dict()
    raw["elasticity_factor"] = x
    if grouper is not None:
        raw["grouper"] = grouper
    inputs = {}
    earliest: dict[SystemStreamPartition, str] = {}
    offset_key = int
    for stream in config.inputs:
        system = open_system(stream.system, home)
        offset_key = system.offset_key
        meta = system.describe(stream.stream)
        inputs[stream] = meta.partition_count
        for p, part in meta.partitions.items():
            earliest[SystemStreamPartition(stream.system, stream.stream, p)] = part.earliest
    model = plan_job_model(
        job,
        (control.latest_version(job) or current.version) + 1,
        inputs,
        factor=x,
        grouper=raw.get("grouper", config.grouper),
        containers=config.containers,
        previous=current,
        config={CONFIG_KEY: json.dumps(raw, sort_keys=True)},
    )
    old = control.latest_checkpoints(job, current.version)
    checkpoints = migrate_checkpoints(old, x, model.whole_ssps(), earliest, offset_key)
    return RescalePlan(current, model, checkpoints)


def apply_rescale(home: Home, plan: RescalePlan, reason: str) -> JobModel:
    """Save N+1, write its start checkpoints, then activate it: in this order, so a crash leaves one model in force."""
    control = ControlPlane(home)
    control.save_job_model(plan.model, reason=reason)
    control.write_checkpoints(plan.model.job_name, plan.model.version, plan.checkpoints, batch_id=-1)
    control.activate(plan.model.job_name, plan.model.version, reason=reason)
    return plan.model


def rescale(home: Home, job: str, factor: object, reason: str = "rescale") -> JobModel:
    return apply_rescale(home, plan_rescale(home, job, factor), reason)
