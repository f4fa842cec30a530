"""Registering a job: its first model version (start checkpoints at the earliest positions) and its output tables."""

from __future__ import annotations

from pipelines import planning
from pipelines.control import ControlPlane, Home
from pipelines.core.model import JobModel
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig
from pipelines.jobs.output_schema import parse_output_schema
from pipelines.runtime.outputs import ensure_output_tables


def create_job(home: Home, config: JobConfig) -> JobModel:
    """Plan version 1 of a new job, save and activate it with its start checkpoints, make its tables."""
    if ControlPlane(home).job_models.latest_version(config.name) is not None:
        raise ConfigError(f"job {config.name!r} already exists; change it with a rescale, not a second create")
    output = parse_output_schema(config.output_schema)
    plan = planning.plan_first(home, config)
    ensure_output_tables(home, config, output)
    planning.save(home, plan, "job create", activate=True)
    return plan.model
