"""Registering a job: its config, its first job model, start checkpoints, and its output tables."""

from __future__ import annotations

import json

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.core.checkpoints import CheckpointMap, migrate_checkpoints
from pipelines.core.groupers import plan_job_model
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig
from pipelines.jobs.output_schema import parse_output_schema
from pipelines.systems.registry import open_system

CONFIG_KEY = "job_config"


def job_config(model: JobModel) -> JobConfig:
    """The configuration a model was planned from (stored in the model, so each version is self-contained)."""
    try:
        return JobConfig.from_dict(
            json.loads(model.config[CONFIG_KEY]), origin=f"job {model.job_name} v{model.version}"
        )
    except KeyError:
        raise ConfigError(f"job model {model.job_name} v{model.version} carries no job configuration") from None


def create_job(home: Home, config: JobConfig) -> JobModel:
    """Plan version 1 of a new job, write its start checkpoints (earliest offsets), activate it, make its tables."""
    control = ControlPlane(home)
    if control.job_models.latest_version(config.name) is not None:
        raise ConfigError(f"job {config.name!r} already exists; change it with a rescale, not a second create")
    output = parse_output_schema(config.output_schema)
    inputs = {}
    earliest: dict[SystemStreamPartition, str] = {}
    for stream in config.inputs:
        meta = open_system(stream.system, home).describe(stream.stream)
        inputs[stream] = meta.partition_count
        for p, part in meta.partitions.items():
            earliest[SystemStreamPartition(stream.system, stream.stream, p)] = part.earliest
    model = plan_job_model(
        config.name,
        1,
        inputs,
        factor=config.elasticity_factor,
        grouper=config.grouper,
        containers=config.containers,
        config={CONFIG_KEY: json.dumps(config.to_dict(), sort_keys=True)},
    )
    start = migrate_checkpoints(CheckpointMap(1, {}), model.elasticity_factor, earliest, earliest)
    ensure_output_tables(home, config, output)
    control.job_models.save(model, reason="job create")
    control.checkpoints.write(config.name, model.version, start, batch_id=-1)
    control.job_models.activate(config.name, model.version, reason="job create")
    return model


def ensure_output_tables(home: Home, config: JobConfig, output: object | None = None) -> None:
    """Create the sink and dead-letter Delta tables with their schemas, if they do not exist yet."""
    from deltalake import DeltaTable

    from pipelines.runtime import schemas

    output = output or parse_output_schema(config.output_schema)
    home.sinks.mkdir(parents=True, exist_ok=True)
    for name, struct in (
        (config.sink_table, schemas.sink_schema(output)),  # type: ignore[arg-type]
        (config.dead_letter_table, schemas.DEAD_LETTER),
    ):
        path = home.sinks / name
        if not (path / "_delta_log").exists():
            DeltaTable.create(str(path), schema=schemas.arrow(struct), mode="ignore")
