"""The job model: which virtual task reads which key buckets, and where it runs.

Samza's shapes, kept: JobModel -> ContainerModel -> TaskModel -> SSPs. A
virtual task is a TaskModel whose SSPs carry a key bucket. Task names follow
SEP-32: the base name of the task the grouper would make without elasticity,
decorated ``-<bucket>-<factor>`` when the factor is above 1
(``Partition 0`` at X = 1, ``Partition 0-1-4`` for bucket 1 of 4).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.core.bulk import collector_paused
from pipelines.core.limits import MAX_DIGITS
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.errors import ModelError

FORMAT_VERSION = 1

_PARTITION_BASE = re.compile(r"^Partition (?P<partition>[0-9]{1,30})$")
_SSP_BASE = re.compile(
    r"^SystemStreamPartition \[(?P<system>[^,\]]+), (?P<stream>[^,\]]+), (?P<partition>[0-9]{1,30})\]$"
)
"""Partition numbers in task names: digits 0-9, at most ``limits.MAX_DIGITS`` of them (``int()`` of more raises)."""


@dataclass(frozen=True, order=True, slots=True)
class TaskName:
    """A task's name; for a virtual task it encodes its key bucket and the factor."""

    name: str

    def __str__(self) -> str:
        return self.name

    @classmethod
    def virtual(cls, base: str, bucket: int, factor: int) -> TaskName:
        if factor == 1:
            return cls(base)
        return cls(f"{base}-{bucket}-{factor}")

    def virtual_parts(self) -> tuple[str, int, int] | None:
        """(base, bucket, factor) of a ``<base>-<bucket>-<factor>`` name; string splits, not a regex, because
        planning 160,000 virtual tasks asks this several times per task."""
        rest, _, factor = self.name.rpartition("-")
        base, _, bucket = rest.rpartition("-")
        if (
            base
            and 0 < len(bucket) <= MAX_DIGITS
            and 0 < len(factor) <= MAX_DIGITS  # int() of 5,000 digits raises; no bucket or factor is that long
            and bucket.isascii()
            and bucket.isdigit()
            and factor.isascii()
            and factor.isdigit()
        ):
            return base, int(bucket), int(factor)
        return None

    @property
    def base(self) -> str:
        parts = self.virtual_parts()
        return parts[0] if parts else self.name

    @property
    def key_bucket(self) -> int:
        parts = self.virtual_parts()
        return parts[1] if parts else 0

    @property
    def factor(self) -> int:
        parts = self.virtual_parts()
        return parts[2] if parts else 1

    @property
    def partition(self) -> int | None:
        """The partition a ``Partition N`` or ``SystemStreamPartition [..]`` task is named after."""
        base = self.base
        m = _PARTITION_BASE.match(base) or _SSP_BASE.match(base)
        return int(m["partition"]) if m else None


def partition_task_base(partition: int) -> str:
    return f"Partition {partition}"


def ssp_task_base(ssp: SystemStreamPartition) -> str:
    return f"SystemStreamPartition [{ssp.system}, {ssp.stream}, {ssp.partition}]"


@dataclass(frozen=True)
class TaskModel:
    task_name: TaskName
    ssps: frozenset[SystemStreamPartition]
    changelog_partition: int = 0

    @property
    def mode(self) -> str:
        """ "Virtual" when the task reads key buckets, "Active" for a whole-partition task."""
        return "Virtual" if any(s.key_bucket is not None for s in self.ssps) else "Active"

    def to_json(self) -> dict[str, Any]:
        return {
            "taskName": self.task_name.name,
            "systemStreamPartitions": [s.to_json() for s in sorted(self.ssps, key=_ssp_sort)],
            "changelogPartition": self.changelog_partition,
            "taskMode": self.mode,
        }

    @classmethod
    def from_json(cls, value: Any, where: str) -> TaskModel:
        _expect(isinstance(value, dict), where, "a task must be an object")
        try:
            name = value["taskName"]
            ssps = value["systemStreamPartitions"]
        except KeyError as missing:
            raise ModelError(f"{where}: task lacks field {missing}") from None
        _expect(isinstance(name, str) and bool(name), where, "taskName must be a non-empty string")
        _expect(isinstance(ssps, list), where, "systemStreamPartitions must be a list")
        try:
            parsed = frozenset(SystemStreamPartition.from_json(s) for s in ssps)
        except ModelError as e:
            raise ModelError(f"{where}: {e}") from None
        changelog = value.get("changelogPartition", 0)
        _expect(isinstance(changelog, int), where, "changelogPartition must be an integer")
        return cls(TaskName(name), parsed, changelog)


@dataclass(frozen=True)
class ContainerModel:
    id: str
    tasks: Mapping[TaskName, TaskModel]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tasks": {t.name: self.tasks[t].to_json() for t in sorted(self.tasks)},
        }

    @classmethod
    def from_json(cls, value: Any, where: str) -> ContainerModel:
        _expect(isinstance(value, dict), where, "a container must be an object")
        cid = value.get("id")
        tasks = value.get("tasks")
        _expect(isinstance(cid, str), where, "container id must be a string")
        _expect(isinstance(tasks, dict), where, "container tasks must be an object")
        parsed: dict[TaskName, TaskModel] = {}
        for name, task in tasks.items():
            model = TaskModel.from_json(task, f"{where}.tasks[{name!r}]")
            _expect(model.task_name.name == name, where, f"task key {name!r} != taskName {model.task_name}")
            parsed[model.task_name] = model
        return cls(cid, parsed)


@dataclass(frozen=True)
class JobModel:
    """One version of a job's layout; versions only grow, and one is active at a time."""

    job_name: str
    version: int
    elasticity_factor: int
    grouper: str
    containers: Mapping[str, ContainerModel]
    config: Mapping[str, str] = field(default_factory=dict)

    def tasks(self) -> Iterator[TaskModel]:
        for cid in sorted(self.containers):
            container = self.containers[cid]
            for name in sorted(container.tasks):
                yield container.tasks[name]

    @property
    def task_count(self) -> int:
        return sum(len(c.tasks) for c in self.containers.values())

    def ssp_to_task(self) -> dict[SystemStreamPartition, TaskName]:
        """Every (SSP, key bucket) this model reads, and the one task that reads it."""
        return {ssp: task.task_name for task in self.tasks() for ssp in task.ssps}

    def partitions(self) -> dict[SystemStream, int]:
        """Partition count per input stream, as this model saw it when it was planned."""
        counts: dict[SystemStream, int] = {}
        for ssp in self.ssp_to_task():
            counts[ssp.system_stream] = max(counts.get(ssp.system_stream, 0), ssp.partition + 1)
        return counts

    def whole_ssps(self) -> set[SystemStreamPartition]:
        return {ssp.whole() for ssp in self.ssp_to_task()}

    def previous_mapping(self) -> dict[SystemStreamPartition, str]:
        """SEP-5's previous SSP -> task assignment, keyed by whole partitions and base task names."""
        return {ssp.whole(): task.base for ssp, task in self.ssp_to_task().items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "jobName": self.job_name,
            "version": self.version,
            "elasticityFactor": self.elasticity_factor,
            "grouper": self.grouper,
            "config": dict(sorted(self.config.items())),
            "containers": {cid: self.containers[cid].to_json() for cid in sorted(self.containers)},
        }

    def dumps(self) -> str:
        with collector_paused():  # the JSON form of 160,000 virtual tasks is a million small objects too
            return json.dumps(self.to_json(), sort_keys=False, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str | bytes) -> JobModel:
        try:
            value = json.loads(text)
        except (ValueError, TypeError) as e:
            raise ModelError(f"job model is not valid JSON: {e}") from None
        return cls.from_json(value)

    @classmethod
    def from_json(cls, value: Any) -> JobModel:
        """Parse and check a job model; every problem names where it is."""
        _expect(isinstance(value, dict), "job model", "must be a JSON object")
        fmt = value.get("format", FORMAT_VERSION)
        _expect(
            isinstance(fmt, int) and fmt <= FORMAT_VERSION,
            "job model",
            f"format {fmt!r} is newer than this version understands ({FORMAT_VERSION})",
        )
        for key in ("jobName", "version", "containers"):
            _expect(key in value, "job model", f"lacks field {key!r}")
        job, version = value["jobName"], value["version"]
        _expect(isinstance(job, str) and bool(job), "job model", "jobName must be a non-empty string")
        _expect(isinstance(version, int) and version >= 0, "job model", "version must be an integer >= 0")
        factor = value.get("elasticityFactor", 1)  # models from before elasticity have none
        _expect(isinstance(factor, int) and factor >= 1, "job model", "elasticityFactor must be an integer >= 1")
        grouper = value.get("grouper", "GroupByPartition")
        config = value.get("config", {})
        _expect(isinstance(config, dict), "job model", "config must be an object")
        containers = value["containers"]
        _expect(isinstance(containers, dict), "job model", "containers must be an object")
        with collector_paused():  # a model of 160,000 virtual tasks is a million small acyclic objects
            parsed = {
                cid: ContainerModel.from_json(c, f"job model containers[{cid!r}]") for cid, c in containers.items()
            }
        model = cls(job, version, factor, grouper, parsed, {str(k): str(v) for k, v in config.items()})
        check_model(model)
        return model


def check_model(model: JobModel) -> None:
    """Invariants every model must hold: each (SSP, bucket) read by exactly one task, every bucket read."""
    x = model.elasticity_factor
    owner: dict[SystemStreamPartition, TaskName] = {}
    names: set[TaskName] = set()
    # containers in order, their tasks as stored: the checks need no sorted walk (160,000 tasks at 10,000 x 16)
    for task in (t for cid in sorted(model.containers) for t in model.containers[cid].tasks.values()):
        if task.task_name in names:
            raise ModelError(f"job model: task {task.task_name} appears in two containers")
        names.add(task.task_name)
        for ssp in task.ssps:
            b = ssp.key_bucket
            if (b is None) != (x == 1) or (b is not None and b >= x):
                raise ModelError(
                    f"job model: task {task.task_name} reads {ssp}, which is not a key bucket of factor {x}"
                )
            first = owner.setdefault(ssp, task.task_name)
            if first != task.task_name:
                raise ModelError(f"job model: {ssp} is read by both {first} and {task.task_name}")
    if x > 1:
        buckets: dict[tuple[str, str, int], set[int]] = {}
        for ssp in owner:
            buckets.setdefault((ssp.system, ssp.stream, ssp.partition), set()).add(ssp.key_bucket or 0)
        for (system, stream, partition), present in buckets.items():
            if len(present) != x:
                missing = min(set(range(x)) - present)
                whole = SystemStreamPartition(system, stream, partition)
                raise ModelError(f"job model: key bucket {missing} of {whole} is read by no task")


def _expect(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise ModelError(f"{where}: {message}")


def _ssp_sort(ssp: SystemStreamPartition) -> tuple[str, str, int, int]:
    return (ssp.system, ssp.stream, ssp.partition, -1 if ssp.key_bucket is None else ssp.key_bucket)
