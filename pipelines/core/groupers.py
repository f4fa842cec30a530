"""Groupers: input partitions -> (virtual) tasks -> containers.

An SSP grouper decides which task reads which partitions; with elasticity
factor X each task becomes X virtual tasks, one per key bucket. The task-name
grouper then places virtual tasks in containers. ``plan_job_model`` ties them
together and is the only way job models are made.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Protocol

from pipelines.core.bulk import collector_paused
from pipelines.core.hashing import validate_factor
from pipelines.core.limits import check_partition_count, check_task_count, shown
from pipelines.core.model import (
    ContainerModel,
    JobModel,
    TaskModel,
    TaskName,
    partition_task_base,
    ssp_task_base,
)
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.errors import ConfigError, ModelError, PartitionChangeError

# base task name -> the whole partitions (no key bucket) it reads
BaseGrouping = dict[str, set[SystemStreamPartition]]


class SspGrouper(Protocol):
    """SEP-5's grouper interface: the previous SSP -> task mapping comes in with the SSPs."""

    name: str
    supports_elasticity: bool

    def group(self, ssps: set[SystemStreamPartition], previous: Mapping[SystemStreamPartition, str]) -> BaseGrouping:
        """Group whole partitions into base tasks; elasticity is applied afterwards."""
        ...


class GroupByPartition:
    """Task ``Partition i`` reads partition i of every input stream."""

    name = "GroupByPartition"
    supports_elasticity = True

    def group(self, ssps: set[SystemStreamPartition], previous: Mapping[SystemStreamPartition, str]) -> BaseGrouping:
        groups: BaseGrouping = defaultdict(set)
        for ssp in ssps:
            groups[partition_task_base(ssp.partition)].add(ssp)
        return dict(groups)


class GroupBySystemStreamPartition:
    """One task per input partition of each stream; after an expansion, still one per original partition.

    SEP-5, as Samza's ``SSPGrouperProxy`` does it: a partition the previous
    model read stays with the task that read it, and new partition p joins the
    task of partition ``p mod N`` of the same stream, N its previous count
    (Kafka's partitioner keeps every moved key there), so tasks keep their
    names and keys their task through any number of expansions and re-plans.
    A stream that is new to the job, or one that another grouper placed
    before, gets tasks of its own, named after its partitions.
    """

    name = "GroupBySystemStreamPartition"
    supports_elasticity = True

    def group(self, ssps: set[SystemStreamPartition], previous: Mapping[SystemStreamPartition, str]) -> BaseGrouping:
        before = _partition_counts(previous)
        own: dict[SystemStream, set[str]] = defaultdict(set)  # the names this grouper gave each stream's tasks
        for ssp in previous:
            own[ssp.system_stream].add(ssp_task_base(ssp))
        groups: BaseGrouping = defaultdict(set)
        for ssp in ssps:
            count = before.get(ssp.system_stream)
            source = ssp if count is None or ssp.partition < count else ssp.at_partition(ssp.partition % count)
            task = previous.get(source)
            groups[task if task in own[ssp.system_stream] else ssp_task_base(source)].add(ssp)
        return dict(groups)


class AllSspToSingleTask:
    """Every partition in one task: for jobs that must see all input in one place.

    It cannot be elastic: splitting its single task by key bucket would make it
    something other than a single task, so a factor above 1 is refused.
    """

    name = "AllSspToSingleTask"
    supports_elasticity = False

    def group(self, ssps: set[SystemStreamPartition], previous: Mapping[SystemStreamPartition, str]) -> BaseGrouping:
        return {"Task-0": set(ssps)} if ssps else {}


class GroupByPartitionFixedTaskNum:
    """SEP-5: after partition expansion, keys stay with the task that read them.

    With no previous mapping (first model) this is GroupByPartition. After a
    stream grows from N to kN partitions, partition p goes to task
    ``Partition (p mod N)``, where N is the number of tasks that read the stream
    before. Kafka's partitioner (``h mod kN``) keeps ``p' mod N == p`` for every
    key that moved, so each key is still read by the same task.
    """

    name = "GroupByPartitionFixedTaskNum"
    supports_elasticity = True

    def group(self, ssps: set[SystemStreamPartition], previous: Mapping[SystemStreamPartition, str]) -> BaseGrouping:
        previous_tasks: dict[SystemStream, set[str]] = defaultdict(set)
        for ssp, task in previous.items():
            previous_tasks[ssp.system_stream].add(task)
        groups: BaseGrouping = defaultdict(set)
        for ssp in ssps:
            tasks = previous_tasks.get(ssp.system_stream)
            task_count = len(tasks) if tasks else None
            partition = ssp.partition if task_count is None else ssp.partition % task_count
            groups[partition_task_base(partition)].add(ssp)
        return dict(groups)


def _partition_counts(previous: Mapping[SystemStreamPartition, str]) -> dict[SystemStream, int]:
    """How many partitions each stream had in the previous model (its SSPs are numbered from 0)."""
    counts: dict[SystemStream, int] = defaultdict(int)
    for ssp in previous:
        counts[ssp.system_stream] = max(counts[ssp.system_stream], ssp.partition + 1)
    return dict(counts)


def expansion_grouper(grouper: str) -> str:
    """The grouper that absorbs an input expansion of a job grouped by ``grouper``, keeping keys with their tasks.

    GroupByPartition names tasks by partition number, so it turns into its
    fixed-task-number form; the per-SSP grouper and the single task keep
    theirs (each already keeps its task count and names across an expansion).
    """
    return GroupByPartitionFixedTaskNum.name if grouper == GroupByPartition.name else grouper


GROUPERS: dict[str, Callable[[], SspGrouper]] = {
    g.name: g
    for g in (GroupByPartition, GroupBySystemStreamPartition, AllSspToSingleTask, GroupByPartitionFixedTaskNum)
}


def grouper_by_name(name: str) -> SspGrouper:
    try:
        return GROUPERS[name]()
    except KeyError:
        raise ConfigError(f"unknown grouper {name!r}; choose one of {', '.join(sorted(GROUPERS))}") from None


def virtual_tasks(groups: BaseGrouping, factor: int) -> list[TaskModel]:
    """Split each base task into ``factor`` virtual tasks, bucket b reading bucket b of each of its SSPs.

    They come ordered by the partitions they read, then by bucket, so the
    virtual tasks of one SSP are adjacent (``group_into_containers`` cuts this
    order). Bases read disjoint partitions, so sorting the bases is the whole
    sort: 10,000 keys rather than 160,000 at 10,000 x 16, and no name is
    parsed back.
    """
    bases = sorted(groups, key=lambda base: (_locality_key(groups[base]), base))
    tasks: list[TaskModel] = []
    for base in bases:
        ssps = groups[base]
        changelog = _changelog_partition(TaskName(base))
        if factor == 1:
            tasks.append(TaskModel(TaskName(base), frozenset(ssps), changelog))
            continue
        for b in range(factor):
            tasks.append(
                TaskModel(TaskName.virtual(base, b, factor), frozenset([s.bucket(b) for s in ssps]), changelog)
            )
    return tasks


def group_into_containers(tasks: list[TaskModel], containers: int) -> dict[str, list[TaskModel]]:
    """Balance tasks (in ``virtual_tasks`` order) over containers, keeping the virtual tasks of one SSP together.

    The order is cut into ``containers`` runs whose sizes differ by at most
    one. Balance is exact and at most ``containers - 1`` partitions are read
    by two containers (each cut can split one group), the SEP-32 consumption
    optimisation where it can hold. Containers with no task are not created.
    """
    if not isinstance(containers, int) or isinstance(containers, bool) or containers < 1:
        raise ConfigError(f"container count must be a whole number >= 1, got {containers!r}")
    count = min(containers, len(tasks)) or 1
    size, extra = divmod(len(tasks), count)
    result: dict[str, list[TaskModel]] = {}
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            result[str(i)] = tasks[start:end]
        start = end
    return result


def plan_job_model(
    job_name: str,
    version: int,
    inputs: Mapping[SystemStream, int],
    *,
    factor: object = 1,
    grouper: str = "GroupByPartition",
    containers: int = 1,
    previous: JobModel | None = None,
    config: Mapping[str, str] | None = None,
    slotted: frozenset[SystemStream] = frozenset(),
) -> JobModel:
    """Make job model ``version`` for the given input partition counts.

    With ``previous`` the change of input is checked first: a stream may not
    lose partitions, and (for the fixed-task-num grouper) may only grow to a
    multiple of its previous count. ``slotted`` streams are exempt: their
    partitions are slots whose shards the input system lays out on any count
    from the checkpoints (Kinesis after a reshard), so nothing unread is lost.
    """
    x = validate_factor(factor)
    impl = grouper_by_name(grouper)
    if x > 1 and not impl.supports_elasticity:
        raise ConfigError(f"{impl.name} cannot be elastic: it needs elasticity factor 1, got {x}")
    if not inputs:
        raise ConfigError("a job needs at least one input stream")
    for stream, count in inputs.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"input {stream} must have a whole number of partitions >= 1, got {shown(count)}")
        check_partition_count(count, f"the partition count of input {stream}")
    check_task_count(sum(inputs.values()), x)  # before a single task is built: 100,000 x 1024 would take hours
    mapping: dict[SystemStreamPartition, str] = {}
    if previous is not None:
        check_partition_change(
            {s: n for s, n in previous.partitions().items() if s not in slotted},
            inputs,
            fixed_task_num=impl.name in (GroupByPartitionFixedTaskNum.name, GroupBySystemStreamPartition.name),
        )
        if version <= previous.version:
            raise ConfigError(f"new model version {version} must be above the previous {previous.version}")
        mapping = previous.previous_mapping()
    ssps = {SystemStreamPartition(s.system, s.stream, p) for s, n in inputs.items() for p in range(n)}
    groups = impl.group(ssps, mapping)
    check_grouping(impl.name, groups, ssps)
    with collector_paused():
        placement = group_into_containers(virtual_tasks(groups, x), containers)
        container_models = {
            cid: ContainerModel(cid, {t.task_name: t for t in placed}) for cid, placed in placement.items()
        }
    # No check_model here: the grouping was checked above, and expanding a checked grouping reads each bucket
    # of each partition exactly once by construction (a property test holds planned models to check_model).
    return JobModel(job_name, version, x, impl.name, container_models, dict(config or {}))


def check_grouping(grouper: str, groups: BaseGrouping, ssps: set[SystemStreamPartition]) -> None:
    """A grouper's output must read every input partition exactly once, whole; it is pluggable, so check it."""
    seen: dict[SystemStreamPartition, str] = {}
    for base, members in groups.items():
        if not members:
            raise ModelError(f"grouper {grouper} made task {base!r} with no input")
        for ssp in members:
            if ssp not in ssps:
                raise ModelError(f"grouper {grouper} gave task {base!r} {ssp}, which is not an input partition")
            first = seen.setdefault(ssp, base)
            if first != base:
                raise ModelError(f"grouper {grouper} gave {ssp} to both {first!r} and {base!r}")
    if len(seen) != len(ssps):
        missing = min(ssps - seen.keys())
        raise ModelError(f"grouper {grouper} left {missing} to no task")


def check_partition_change(
    before: Mapping[SystemStream, int], after: Mapping[SystemStream, int], *, fixed_task_num: bool
) -> None:
    """Refuse input changes that would lose data or break key-to-task stability."""
    for stream, old in sorted(before.items()):
        new = after.get(stream)
        if new is not None:  # an input removed from the job's config is the user's choice
            check_growth(f"input {stream}", old, new, multiple=fixed_task_num)


def check_growth(what: str, old: int, new: int, *, multiple: bool = True) -> None:
    """The one rule for a partition count going from ``old`` to ``new``: every expansion, planned or found, and
    every migration of a checkpoint map to more partitions is held to it (docs/design.md, "Order across
    repartitioning"). Partitions are never removed; and, where keys must keep their task and their order
    (SEP-5, and every input this platform expands), the count is only multiplied, so a key moves from
    partition p only to partitions p' with p' mod old == p.
    """
    if new < old:
        raise PartitionChangeError(
            f"{what} goes from {old} to {new} partitions: partitions can be added, never removed "
            "(their unread records would be lost)"
        )
    if multiple and new % old:
        raise PartitionChangeError(
            f"{what} goes from {old} to {new} partitions, which is not a multiple of {old}: keys keep their "
            f"order and their tasks (SEP-5) only when the count is multiplied, e.g. to {2 * old} or {3 * old}"
        )


def _locality_key(
    ssps: set[SystemStreamPartition] | frozenset[SystemStreamPartition],
) -> tuple[tuple[str, str, int], ...]:
    return tuple(sorted({(s.system, s.stream, s.partition) for s in ssps}))


def _changelog_partition(name: TaskName) -> int:
    partition = name.partition
    return partition if partition is not None else 0
