"""Registering a job: its first model version (start checkpoints at the earliest positions) and its output tables."""

from __future__ import annotations

from pipelines import planning
from pipelines.control import ControlPlane, Home
from pipelines.core.autosize import load_policy
from pipelines.core.model import JobModel
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig, job_config
from pipelines.jobs.output_schema import parse_output_schema
from pipelines.jobs.process import load_process_function
from pipelines.runtime.outputs import ensure_output_tables


def create_job(home: Home, config: JobConfig) -> JobModel:
    """Plan version 1 of a new job, save and activate it with its start checkpoints, make its tables."""
    if ControlPlane(home).job_models.latest_version(config.name) is not None:
        raise ConfigError(f"job {config.name!r} already exists; change it with a rescale, not a second create")
    _refuse_shared_tables(home, config)
    load_process_function(config.process)  # a typo in the path fails here, not inside Spark's first batch
    if config.autosize:  # and a policy that does not load here, not at its first decision minutes later
        load_policy(config.autosize_config().policy)
    from pipelines.adjunct.runtime import check_job_stores

    check_job_stores(home, config)  # adjunct stores: streams exist, partitioned ones are co-partitioned
    _check_state_inputs(home, config)
    output = parse_output_schema(config.output_schema)
    plan = planning.plan_first(home, config)
    ensure_output_tables(home, config, output)
    planning.save(home, plan, "job create", activate=True)
    return plan.model


def _check_state_inputs(home: Home, config: JobConfig) -> None:
    """A stateful job's every key must reach one virtual task per batch: with several inputs, only if the task of
    partition i reads partition i of each (GroupByPartition, or SEP-5's fixed task number) and the inputs are
    co-partitioned (the same partition count, so one key's records share a partition number). Otherwise two
    tasks could fold the same key at once and one's change would lose the other's."""
    if not config.state or len(config.inputs) < 2:
        return
    if config.grouper not in ("GroupByPartition", "GroupByPartitionFixedTaskNum", "AllSspToSingleTask"):
        raise ConfigError(
            f"job {config.name!r} keeps state over {len(config.inputs)} inputs with {config.grouper}, which gives each "
            "partition of each input a task of its own, so one key could be folded by two tasks at once; use "
            "GroupByPartition with co-partitioned inputs"
        )
    from pipelines.systems.registry import JobSystems

    with JobSystems(home, config.systems) as systems:
        counts = {str(s): len(systems.of(s.system).describe(s.stream).partitions) for s in config.inputs}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{s} {n}" for s, n in counts.items())
        raise ConfigError(
            f"job {config.name!r} keeps state over inputs that are not co-partitioned ({listed} partitions): a key's "
            "records must share a partition number in every input, so one task folds them; give the inputs the "
            "same partition count and producer keys"
        )


def _refuse_shared_tables(home: Home, config: JobConfig) -> None:
    """A sink belongs to one job: a second job writing into it would be counted as its duplicates and losses.

    The checks (no loss, no duplicates) read a job's sink as that job's output,
    and the exactly-once commit is keyed by the job; two jobs on one table
    break both, silently. Refused before anything is written.
    """
    mine = {config.sink_table: "sink", config.dead_letter_table: "dead-letter table"}
    models = ControlPlane(home).job_models
    for other in models.jobs():
        version = models.active_version(other) or models.latest_version(other)
        if version is None:
            continue
        try:
            theirs = job_config(models.get(other, version))
        except ConfigError:
            continue  # a model saved without its configuration (tools, tests) names no tables
        for table, role in ((theirs.sink_table, "sink"), (theirs.dead_letter_table, "dead-letter table")):
            if table in mine:
                raise ConfigError(
                    f"job {config.name!r} cannot use table {table!r} as its {mine[table]}: it is the {role} of "
                    f"job {other!r}, and a table belongs to one job; name another table in the job's YAML"
                )
