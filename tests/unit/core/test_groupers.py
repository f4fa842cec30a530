from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.groupers import check_grouping, expansion_grouper, group_into_containers, plan_job_model
from pipelines.core.hashing import key_bucket
from pipelines.core.model import TaskName, check_model
from pipelines.core.partitioner import kafka_partition
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.errors import ConfigError, ModelError, PartitionChangeError

from .strategies import containers, elastic_groupers, factors, inputs, partition_counts

EVENTS = SystemStream("deltalog", "events")


@given(inputs(), factors, elastic_groupers, containers)
def test_every_key_bucket_is_read_by_exactly_one_virtual_task(ins, factor, grouper, c) -> None:
    model = plan_job_model("j", 1, ins, factor=factor, grouper=grouper, containers=c)
    owners: dict[SystemStreamPartition, list[TaskName]] = {}
    for task in model.tasks():
        for ssp in task.ssps:
            owners.setdefault(ssp, []).append(task.task_name)
    expected = {
        SystemStreamPartition(s.system, s.stream, p, None if factor == 1 else b)
        for s, n in ins.items()
        for p in range(n)
        for b in range(factor)
    }
    assert set(owners) == expected
    assert all(len(tasks) == 1 for tasks in owners.values())
    check_model(model)  # the planner checks the grouping only; what it expands from it must hold the model's rules


@given(partition_counts, factors, containers)
def test_task_count_is_partitions_times_factor(n: int, factor: int, c: int) -> None:
    model = plan_job_model("j", 1, {EVENTS: n}, factor=factor, containers=c)
    assert model.task_count == n * factor


@given(inputs(), factors)
def test_group_by_ssp_makes_one_task_per_partition_and_bucket(ins, factor) -> None:
    model = plan_job_model("j", 1, ins, factor=factor, grouper="GroupBySystemStreamPartition")
    assert model.task_count == sum(ins.values()) * factor


@given(inputs(), factors, elastic_groupers)
def test_task_names_parse_back_to_partition_bucket_and_factor(ins, factor, grouper) -> None:
    model = plan_job_model("j", 1, ins, factor=factor, grouper=grouper)
    for task in model.tasks():
        name = TaskName(task.task_name.name)
        assert name.factor == factor
        assert {s.partition for s in task.ssps} == {name.partition}
        buckets = {s.key_bucket for s in task.ssps}
        assert buckets == ({None} if factor == 1 else {name.key_bucket})


def test_sep32_names() -> None:
    one = plan_job_model("j", 1, {EVENTS: 2}, factor=1)
    assert sorted(t.task_name.name for t in one.tasks()) == ["Partition 0", "Partition 1"]
    four = plan_job_model("j", 1, {EVENTS: 1}, factor=4)
    assert sorted(t.task_name.name for t in four.tasks()) == [f"Partition 0-{b}-4" for b in range(4)]
    ssp = plan_job_model("j", 1, {EVENTS: 1}, factor=2, grouper="GroupBySystemStreamPartition")
    assert sorted(t.task_name.name for t in ssp.tasks()) == [
        "SystemStreamPartition [deltalog, events, 0]-0-2",
        "SystemStreamPartition [deltalog, events, 0]-1-2",
    ]


def test_group_by_partition_joins_the_same_partition_of_each_stream() -> None:
    clicks = SystemStream("deltalog", "clicks")
    model = plan_job_model("j", 1, {EVENTS: 2, clicks: 3}, factor=2)
    task = next(t for t in model.tasks() if t.task_name.name == "Partition 1-1-2")
    assert task.ssps == {
        SystemStreamPartition("deltalog", "events", 1, 1),
        SystemStreamPartition("deltalog", "clicks", 1, 1),
    }


def test_all_ssp_to_single_task_refuses_elasticity() -> None:
    model = plan_job_model("j", 1, {EVENTS: 3}, grouper="AllSspToSingleTask")
    assert model.task_count == 1
    with pytest.raises(ConfigError, match="AllSspToSingleTask cannot be elastic"):
        plan_job_model("j", 1, {EVENTS: 3}, factor=2, grouper="AllSspToSingleTask")


def test_unknown_grouper_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown grouper 'GroupByMagic'.*GroupByPartition"):
        plan_job_model("j", 1, {EVENTS: 3}, grouper="GroupByMagic")


@given(
    st.integers(1, 6), st.sampled_from([2, 4, 8]), factors, st.lists(st.binary(min_size=1, max_size=12), max_size=40)
)
def test_fixed_task_num_keeps_every_key_with_its_task_after_expansion(n, k, factor, keys) -> None:
    first = plan_job_model("j", 1, {EVENTS: n}, factor=factor, grouper="GroupByPartitionFixedTaskNum")
    grown = plan_job_model(
        "j", 2, {EVENTS: n * k}, factor=factor, grouper="GroupByPartitionFixedTaskNum", previous=first
    )
    assert grown.task_count == first.task_count
    before, after = first.ssp_to_task(), grown.ssp_to_task()
    for key in keys:
        b = key_bucket(key, 0, factor)
        old = SystemStreamPartition("deltalog", "events", kafka_partition(key, n), None if factor == 1 else b)
        new = SystemStreamPartition("deltalog", "events", kafka_partition(key, n * k), None if factor == 1 else b)
        assert before[old] == after[new]


def test_fixed_task_num_twice_keeps_the_original_task_count() -> None:
    g = "GroupByPartitionFixedTaskNum"
    m1 = plan_job_model("j", 1, {EVENTS: 2}, grouper=g)
    m2 = plan_job_model("j", 2, {EVENTS: 4}, grouper=g, previous=m1)
    m3 = plan_job_model("j", 3, {EVENTS: 8}, grouper=g, previous=m2)
    assert m3.task_count == 2
    assert m3.ssp_to_task()[SystemStreamPartition("deltalog", "events", 7)].name == "Partition 1"


def test_shrinking_partitions_is_refused() -> None:
    m1 = plan_job_model("j", 1, {EVENTS: 4})
    with pytest.raises(
        PartitionChangeError, match="goes from 4 to 2 partitions: partitions can be added, never removed"
    ):
        plan_job_model("j", 2, {EVENTS: 2}, previous=m1)


def test_fixed_task_num_refuses_a_non_multiple_expansion() -> None:
    m1 = plan_job_model("j", 1, {EVENTS: 4}, grouper="GroupByPartitionFixedTaskNum")
    with pytest.raises(PartitionChangeError, match="not a multiple of 4"):
        plan_job_model("j", 2, {EVENTS: 6}, grouper="GroupByPartitionFixedTaskNum", previous=m1)


def test_new_version_must_grow() -> None:
    m1 = plan_job_model("j", 3, {EVENTS: 1})
    with pytest.raises(ConfigError, match="version 3 must be above"):
        plan_job_model("j", 3, {EVENTS: 1}, previous=m1)


@pytest.mark.parametrize("bad", [0, -2, True, "x"])
def test_bad_container_count(bad: object) -> None:
    with pytest.raises(ConfigError, match="container count"):
        plan_job_model("j", 1, {EVENTS: 1}, containers=bad)  # type: ignore[arg-type]


def test_bad_partition_count() -> None:
    with pytest.raises(ConfigError, match="partitions >= 1"):
        plan_job_model("j", 1, {EVENTS: 0})
    # refused at once, before a task is built: these hung for hours, building 10**20 or 102 million tasks
    with pytest.raises(ConfigError, match=r"partition count of input deltalog.events must be at most 100,000"):
        plan_job_model("j", 1, {EVENTS: 99999999999999999999})
    with pytest.raises(ConfigError, match=r"100,000 partitions x factor 1,024 = 102,400,000 key buckets"):
        plan_job_model("j", 1, {EVENTS: 100_000}, factor=1024)
    with pytest.raises(ConfigError, match=r"more than the 1,000,000 a job model can hold"):
        plan_job_model("j", 1, {EVENTS: 60_000, SystemStream("deltalog", "other"): 60_000}, factor=16)


@given(partition_counts, factors, containers)
def test_containers_are_balanced_and_keep_virtual_tasks_of_an_ssp_together(n, factor, c) -> None:
    model = plan_job_model("j", 1, {EVENTS: n}, factor=factor, containers=c)
    sizes = [len(cm.tasks) for cm in model.containers.values()]
    assert max(sizes) - min(sizes) <= 1
    assert len(sizes) == min(c, n * factor)
    homes: dict[int, set[str]] = {}
    for cid, cm in model.containers.items():
        for task in cm.tasks.values():
            for ssp in task.ssps:
                homes.setdefault(ssp.partition, set()).add(cid)
    split = sum(1 for h in homes.values() if len(h) > 1)
    assert split <= len(sizes) - 1
    if c == 1 or (factor > 1 and c <= n and n % c == 0):
        assert split == 0  # whole partitions fit evenly: none is split


def test_group_into_containers_of_nothing() -> None:
    assert group_into_containers([], 3) == {}


def test_a_grouping_that_misses_doubles_or_invents_a_partition_is_refused_by_name() -> None:
    p0, p1, p2 = (SystemStreamPartition("deltalog", "events", p) for p in range(3))
    check_grouping("G", {"a": {p0}, "b": {p1}}, {p0, p1})
    with pytest.raises(ModelError, match=r"grouper G left \[deltalog, events, 1\] to no task"):
        check_grouping("G", {"a": {p0}}, {p0, p1})
    with pytest.raises(ModelError, match=r"gave \[deltalog, events, 0\] to both 'a' and 'b'"):
        check_grouping("G", {"a": {p0}, "b": {p0, p1}}, {p0, p1})
    with pytest.raises(ModelError, match=r"gave task 'a' \[deltalog, events, 2\], which is not an input partition"):
        check_grouping("G", {"a": {p0, p2}, "b": {p1}}, {p0, p1})
    with pytest.raises(ModelError, match="made task 'c' with no input"):
        check_grouping("G", {"a": {p0}, "b": {p1}, "c": set()}, {p0, p1})


SSP_GROUPER = "GroupBySystemStreamPartition"
ORDERS = SystemStream("deltalog", "orders")


@given(
    st.integers(1, 5), st.sampled_from([2, 3, 4]), factors, st.lists(st.binary(min_size=1, max_size=12), max_size=40)
)
def test_an_expanded_per_ssp_job_keeps_one_task_per_original_partition_and_every_key_on_its_task(
    n, k, factor, keys
) -> None:
    first = plan_job_model("j", 1, {EVENTS: n, ORDERS: n}, factor=factor, grouper=SSP_GROUPER)
    grown = plan_job_model("j", 2, {EVENTS: n * k, ORDERS: n}, factor=factor, grouper=SSP_GROUPER, previous=first)
    assert grown.task_count == first.task_count == 2 * n * factor, "SEP-5: the task count does not change"
    assert {t.task_name for t in grown.tasks()} == {t.task_name for t in first.tasks()}, "tasks keep their names"
    before, after = first.ssp_to_task(), grown.ssp_to_task()
    for key in keys:
        b = None if factor == 1 else key_bucket(key, 0, factor)
        old = SystemStreamPartition("deltalog", "events", kafka_partition(key, n), b)
        new = SystemStreamPartition("deltalog", "events", kafka_partition(key, n * k), b)
        assert before[old] == after[new]
    for p in range(n):  # the stream that did not grow is untouched
        ssp = SystemStreamPartition("deltalog", "orders", p, None if factor == 1 else 0)
        assert before[ssp] == after[ssp]


@given(
    st.integers(1, 4),
    st.lists(st.tuples(st.sampled_from([1, 1, 2, 3]), factors), min_size=2, max_size=4),
    st.sampled_from([SSP_GROUPER, "GroupByPartition"]),
    st.lists(st.binary(min_size=1, max_size=12), max_size=40),
)
def test_keys_stay_on_their_base_task_through_any_sequence_of_expansions_and_rescales(
    n: int, steps: list[tuple[int, int]], grouper: str, keys: list[bytes]
) -> None:
    """Samza's SSPGrouperProxy: a partition keeps the task that read it, a new one joins that of ``p mod N``,
    at every step, not only the first expansion (a re-plan after 4 -> 8 once split the job into 8 tasks)."""
    model = plan_job_model("j", 1, {EVENTS: n, ORDERS: n}, grouper=grouper)
    first = model.previous_mapping()
    count = n
    for version, (times, factor) in enumerate(steps, start=2):
        count *= times
        grouper = expansion_grouper(model.grouper) if times > 1 else model.grouper
        model = plan_job_model("j", version, {EVENTS: count, ORDERS: n}, factor=factor, grouper=grouper, previous=model)
        assert len(set(model.previous_mapping().values())) == len(set(first.values())), "SEP-5: no task added"
        now = model.previous_mapping()
        for key in keys:
            before = SystemStreamPartition("deltalog", "events", kafka_partition(key, n))
            assert now[SystemStreamPartition("deltalog", "events", kafka_partition(key, count))] == first[before]
        assert all(now[ssp] == task for ssp, task in first.items() if ssp.stream == "orders")


def test_a_per_ssp_job_grouped_by_partition_before_gets_names_of_its_own() -> None:
    """Switching grouper is the user's choice of a new task layout: the per-SSP grouper does not keep the other
    grouper's names, which would read partition i of every stream in one task as GroupByPartition did."""
    first = plan_job_model("j", 1, {EVENTS: 2, ORDERS: 2}, grouper="GroupByPartition")
    switched = plan_job_model("j", 2, {EVENTS: 4, ORDERS: 2}, grouper=SSP_GROUPER, previous=first)
    tasks = {t.task_name.name: sorted(str(s) for s in t.ssps) for t in switched.tasks()}
    assert tasks == {
        "SystemStreamPartition [deltalog, events, 0]": ["[deltalog, events, 0]", "[deltalog, events, 2]"],
        "SystemStreamPartition [deltalog, events, 1]": ["[deltalog, events, 1]", "[deltalog, events, 3]"],
        "SystemStreamPartition [deltalog, orders, 0]": ["[deltalog, orders, 0]"],
        "SystemStreamPartition [deltalog, orders, 1]": ["[deltalog, orders, 1]"],
    }


def test_a_stream_added_with_an_expansion_gets_tasks_of_its_own() -> None:
    first = plan_job_model("j", 1, {EVENTS: 2}, grouper=SSP_GROUPER)
    grown = plan_job_model("j", 2, {EVENTS: 4, ORDERS: 3}, grouper=SSP_GROUPER, previous=first)
    names = {t.task_name.name for t in grown.tasks()}
    assert names == {
        "SystemStreamPartition [deltalog, events, 0]",
        "SystemStreamPartition [deltalog, events, 1]",
        *(f"SystemStreamPartition [deltalog, orders, {p}]" for p in range(3)),
    }
    task = grown.ssp_to_task()[SystemStreamPartition("deltalog", "events", 3)]
    assert task.name == "SystemStreamPartition [deltalog, events, 1]"


def test_a_per_ssp_job_refuses_a_non_multiple_expansion() -> None:
    first = plan_job_model("j", 1, {EVENTS: 2}, grouper=SSP_GROUPER)
    with pytest.raises(PartitionChangeError, match="goes from 2 to 3 partitions, which is not a multiple of 2"):
        plan_job_model("j", 2, {EVENTS: 3}, grouper=SSP_GROUPER, previous=first)


def test_each_grouper_absorbs_an_expansion_in_its_sep5_form() -> None:
    assert expansion_grouper("GroupByPartition") == "GroupByPartitionFixedTaskNum"
    for kept in ("GroupByPartitionFixedTaskNum", SSP_GROUPER, "AllSspToSingleTask"):
        assert expansion_grouper(kept) == kept


def test_slotted_streams_may_change_their_count_either_way_others_may_not_shrink() -> None:
    """Kinesis slots are laid out by the system from the checkpoints; an embedded log partition holds records."""
    kinesis, log = SystemStream("kinesis", "clicks"), SystemStream("deltalog", "events")
    v1 = plan_job_model("j", 1, {kinesis: 3, log: 2}, factor=2)
    v2 = plan_job_model("j", 2, {kinesis: 2, log: 2}, factor=2, previous=v1, slotted=frozenset({kinesis}))
    assert v2.partitions() == {kinesis: 2, log: 2}
    with pytest.raises(PartitionChangeError, match="never removed"):
        plan_job_model("j", 2, {kinesis: 2, log: 2}, factor=2, previous=v1)
    with pytest.raises(PartitionChangeError, match="never removed"):
        plan_job_model("j", 2, {kinesis: 3, log: 1}, factor=2, previous=v1, slotted=frozenset({kinesis}))


def test_a_removed_stream_an_added_one_and_an_expansion_in_one_plan_as_samzas_grouper_proxy_tests_them() -> None:
    """Samza's TestGroupByPartitionWithGrouperProxy: the grown stream keeps its tasks, the removed one's tasks go
    unless another stream reads them, and the new stream reads ``Partition p`` as GroupByPartition would."""
    a, b, c = (SystemStream("kafka", s) for s in ("PVE", "URE", "BOB"))
    first = plan_job_model("j", 1, {a: 4, b: 4}, grouper="GroupByPartition")
    grown = plan_job_model("j", 2, {a: 8, c: 6}, grouper=expansion_grouper(first.grouper), previous=first)
    tasks = {t.task_name.name: sorted((s.stream, s.partition) for s in t.ssps) for t in grown.tasks()}
    assert tasks == {
        **{f"Partition {p}": [("BOB", p), ("PVE", p), ("PVE", p + 4)] for p in range(4)},
        "Partition 4": [("BOB", 4)],
        "Partition 5": [("BOB", 5)],
    }
