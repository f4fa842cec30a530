"""Samza's own serialized forms of job models and SSPs, read and written.

Samza's ``SamzaObjectMapper`` writes hyphenated keys (``task-name``,
``system-stream-partitions``, ``changelog-partition``, ``processor-id``), SSPs
as objects with ``keyBucket`` (``-1``: no key bucket), and the factor in the
config as ``job.elasticity.factor``. Reading that form keeps a model's
structure: which task reads which SSP and bucket number, under the task names
as written (released Samza writes ``Partition 0 1``, we ``Partition 0-1-4``);
our own models survive a round trip exactly. It does not keep key placement:
released Samza buckets a key by ``abs(hashCode) % X``, this platform by
murmur3 of its bytes, so one bucket number holds other keys here. Offsets
brought from Samza must therefore start every bucket of a partition at the
minimum over all of its Samza buckets. See docs/samza.md.
"""

from __future__ import annotations

from typing import Any

from pipelines.core.hashing import validate_factor
from pipelines.core.limits import MAX_TASKS, shown, whole_number
from pipelines.core.model import ContainerModel, JobModel, TaskModel, TaskName, check_model
from pipelines.core.ssp import SystemStreamPartition, validate_name
from pipelines.errors import ConfigError, ModelError

FACTOR_KEY = "job.elasticity.factor"
NAME_KEY = "job.name"
GROUPER_KEY = "job.systemstreampartition.grouper.factory"
_FACTORIES = {
    "org.apache.samza.container.grouper.stream.GroupByPartitionFactory": "GroupByPartition",
    "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory": "GroupBySystemStreamPartition",
    "org.apache.samza.container.grouper.stream.AllSspToSingleTaskGrouperFactory": "AllSspToSingleTask",
}


def ssp_from_samza(value: Any, where: str = "SSP") -> SystemStreamPartition:
    """Samza's ``{"system", "stream", "partition", "keyBucket"}``; a ``keyBucket`` of -1 is no key bucket."""
    if not isinstance(value, dict):
        raise ModelError(f"{where}: a Samza SSP is an object with system, stream, partition, got {value!r}")
    try:
        return SystemStreamPartition.from_json(value)
    except ModelError as e:
        raise ModelError(f"{where}: {e}") from None


def ssp_to_samza(ssp: SystemStreamPartition) -> dict[str, Any]:
    return {"system": ssp.system, "stream": ssp.stream, "partition": ssp.partition, "keyBucket": ssp.bucket_column}


def model_from_samza(document: Any, *, job: str | None = None, version: int = 1) -> JobModel:
    """A job model from Samza's serialized form; the job name comes from ``job`` or the config's ``job.name``."""
    if not isinstance(document, dict):
        raise ModelError("Samza job model: must be a JSON object with config and containers")
    config = document.get("config", {})
    if not isinstance(config, dict):
        raise ModelError("Samza job model: config must be an object")
    config = {str(k): str(v) for k, v in config.items()}
    name = job or config.get(NAME_KEY)
    if not name:
        raise ModelError(f"Samza job model: no job name (config {NAME_KEY!r}); give one")
    try:
        validate_name("job", name)  # the name every job of the home has, from the config as from --job
    except ConfigError as e:
        raise ModelError(f"Samza job model: {NAME_KEY}: {e}") from None
    containers = document.get("containers")
    if not isinstance(containers, dict) or not containers:
        raise ModelError("Samza job model: containers must be a non-empty object")
    parsed: dict[str, ContainerModel] = {}
    for key, container in containers.items():
        where = f"Samza job model containers[{key!r}]"
        if not isinstance(container, dict) or not isinstance(container.get("tasks"), dict):
            raise ModelError(f"{where}: a container is an object with tasks")
        cid = str(container.get("processor-id", container.get("container-id", key)))
        tasks = {}
        for task_key, task in container["tasks"].items():
            task_model = _task_from_samza(task, f"{where}.tasks[{task_key!r}]")
            tasks[task_model.task_name] = task_model
        parsed[cid] = ContainerModel(cid, tasks)
    factor = _factor(config, parsed)
    grouper = _FACTORIES.get(config.get(GROUPER_KEY, ""), "GroupByPartition")
    model = JobModel(name, version, factor, grouper, parsed, config)
    check_model(model)
    return model


def model_to_samza(model: JobModel) -> dict[str, Any]:
    """The model as Samza's ``SamzaObjectMapper`` writes it (its factor and name in the config)."""
    factories = {v: k for k, v in _FACTORIES.items()}
    grouper = "GroupByPartition" if model.grouper == "GroupByPartitionFixedTaskNum" else model.grouper
    config = {**model.config, NAME_KEY: model.job_name, FACTOR_KEY: str(model.elasticity_factor)}
    if grouper in factories:
        config[GROUPER_KEY] = factories[grouper]
    return {
        "config": dict(sorted(config.items())),
        "containers": {
            cid: {
                "processor-id": cid,
                "tasks": {
                    t.name: {
                        "task-name": t.name,
                        "system-stream-partitions": [
                            ssp_to_samza(s) for s in sorted(task.ssps, key=lambda s: (s.system, s.stream, s.partition))
                        ],
                        "changelog-partition": task.changelog_partition,
                        "task-mode": task.mode,
                    }
                    for t, task in sorted(model.containers[cid].tasks.items())
                },
            }
            for cid in sorted(model.containers)
        },
    }


def _task_from_samza(task: Any, where: str) -> TaskModel:
    if not isinstance(task, dict):
        raise ModelError(f"{where}: a task must be an object")
    name = task.get("task-name", task.get("taskName"))
    ssps = task.get("system-stream-partitions", task.get("systemStreamPartitions"))
    if not isinstance(name, str) or not name:
        raise ModelError(f"{where}: task-name must be a non-empty string")
    if not isinstance(ssps, list):
        raise ModelError(f"{where}: system-stream-partitions must be a list")
    given = task.get("changelog-partition", task.get("changelogPartition", 0))
    changelog = whole_number(given, signed=True) if isinstance(given, str) else given
    if not isinstance(changelog, int) or isinstance(changelog, bool) or changelog >= MAX_TASKS:
        raise ModelError(
            f"{where}: changelog-partition must be an integer below {MAX_TASKS:,} (a model's most tasks) in digits "
            f"0-9, got {shown(given)}"
        )
    parsed = frozenset(ssp_from_samza(s, f"{where}.system-stream-partitions[{i}]") for i, s in enumerate(ssps))
    return TaskModel(TaskName(name), parsed, max(changelog, 0))


def _factor(config: dict[str, str], containers: dict[str, ContainerModel]) -> int:
    """``job.elasticity.factor`` if set, else what the task names say (a model without buckets is factor 1)."""
    raw = config.get(FACTOR_KEY)
    if raw is not None:
        try:
            return validate_factor(raw)
        except ConfigError as e:
            raise ModelError(f"Samza job model: {FACTOR_KEY}: {e}") from None
    factors = {t.factor for c in containers.values() for t in c.tasks}
    if len(factors) > 1:
        raise ModelError(f"Samza job model: task names carry different factors {sorted(factors)}")
    try:
        return validate_factor(factors.pop()) if factors else 1
    except ConfigError as e:
        raise ModelError(f"Samza job model: the task names' factor: {e}") from None
