from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.groupers import plan_job_model
from pipelines.core.model import JobModel, TaskName
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import ModelError

from .strategies import containers, elastic_groupers, factors, inputs

FIXTURES = Path(__file__).parent / "fixtures"


@given(inputs(), factors, elastic_groupers, containers)
def test_serde_round_trips(ins, factor, grouper, c) -> None:
    model = plan_job_model("job-a", 4, ins, factor=factor, grouper=grouper, containers=c, config={"k": "v"})
    assert JobModel.loads(model.dumps()) == model


def test_four_part_ssps_when_elastic_three_part_otherwise() -> None:
    from pipelines.core.ssp import SystemStream

    elastic = plan_job_model("j", 1, {SystemStream("kafka", "t"): 1}, factor=2).to_json()
    plain = plan_job_model("j", 1, {SystemStream("kafka", "t"): 1}, factor=1).to_json()
    e_ssps = [
        s for c in elastic["containers"].values() for t in c["tasks"].values() for s in t["systemStreamPartitions"]
    ]
    p_ssps = [s for c in plain["containers"].values() for t in c["tasks"].values() for s in t["systemStreamPartitions"]]
    assert sorted(e_ssps) == [["kafka", "t", 0, 0], ["kafka", "t", 0, 1]]
    assert p_ssps == [["kafka", "t", 0]]


@given(
    st.lists(
        st.builds(
            SystemStreamPartition,
            st.sampled_from(["kafka", "kinesis"]),
            st.sampled_from(["a", "b"]),
            st.integers(0, 3),
            st.none() | st.integers(0, 3),
        ),
        max_size=20,
    )
)
def test_ssps_sort_as_samzas_compare_to_with_the_whole_partition_before_its_buckets(ssps) -> None:
    """Samza's ``SystemStreamPartition.compareTo``: system, stream, partition, key bucket, -1 (none) first. Mixing
    whole partitions and buckets in one sort raised a TypeError before (None against an int)."""
    ordered = sorted(ssps)
    keys = [(s.system, s.stream, s.partition, -1 if s.key_bucket is None else s.key_bucket) for s in ordered]
    assert keys == sorted(keys)
    assert SystemStreamPartition("kafka", "a", 0) < SystemStreamPartition("kafka", "a", 0, 0)
    assert SystemStreamPartition("kafka", "a", 0, 3) < SystemStreamPartition("kafka", "a", 1)
    assert max(SystemStreamPartition("kafka", "a", 1), SystemStreamPartition("kafka", "a", 0, 1)).partition == 1


def test_a_model_written_before_elasticity_still_loads() -> None:
    model = JobModel.loads((FIXTURES / "jobmodel_before_elasticity.json").read_text())
    assert model.elasticity_factor == 1
    assert model.version == 7
    assert model.ssp_to_task() == {
        SystemStreamPartition("kafka", "events", 0): TaskName("Partition 0"),
        SystemStreamPartition("kafka", "events", 1): TaskName("Partition 1"),
    }


def _legacy() -> dict:
    return json.loads((FIXTURES / "jobmodel_before_elasticity.json").read_text())


def _broken(mutate) -> str:
    value = _legacy()
    mutate(value)
    return json.dumps(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        (_broken(lambda v: v.pop("jobName")), "lacks field 'jobName'"),
        (_broken(lambda v: v.update(version=-1)), "version must be an integer"),
        (_broken(lambda v: v.update(elasticityFactor=0)), "elasticityFactor"),
        (_broken(lambda v: v.update(format=99)), "newer than this version"),
        (
            _broken(
                lambda v: v["containers"]["0"]["tasks"]["Partition 0"].update(systemStreamPartitions=[["kafka", 0]])
            ),
            r"containers\['0'\].tasks\['Partition 0'\]: SSP must be",
        ),
        (
            _broken(
                lambda v: v["containers"]["0"]["tasks"]["Partition 1"].update(
                    systemStreamPartitions=[["kafka", "events", 0]]
                )
            ),
            "read by both",
        ),
        (
            _broken(
                lambda v: v["containers"]["0"]["tasks"]["Partition 1"].update(
                    systemStreamPartitions=[["kafka", "events", 1, 3]]
                )
            ),
            "not a key bucket of factor 1",
        ),
    ],
)
def test_corrupt_models_are_refused_with_the_place_named(text: str, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        JobModel.loads(text)


def test_a_model_missing_a_bucket_is_refused() -> None:
    value = _legacy()
    value["elasticityFactor"] = 2
    for i, task in enumerate(value["containers"]["0"]["tasks"].values()):
        task["systemStreamPartitions"] = [["kafka", "events", i, 0]]
    with pytest.raises(ModelError, match=r"key bucket 1 of .* is read by no task"):
        JobModel.from_json(value)


@pytest.mark.parametrize(
    ("name", "base", "bucket", "factor", "partition"),
    [
        ("Partition 0", "Partition 0", 0, 1, 0),
        ("Partition 12-3-16", "Partition 12", 3, 16, 12),
        ("SystemStreamPartition [kafka, a-b.c, 5]-1-2", "SystemStreamPartition [kafka, a-b.c, 5]", 1, 2, 5),
        ("Task-0", "Task-0", 0, 1, None),
        # digits 0-9 only, and no more than 30 of them: int() of 5,000 digits raised ValueError
        pytest.param(f"Partition 0-0-{'9' * 5000}", f"Partition 0-0-{'9' * 5000}", 0, 1, None, id="5000-digit-factor"),
        pytest.param(f"Partition {'9' * 5000}", f"Partition {'9' * 5000}", 0, 1, None, id="5000-digit-partition"),
        ("Partition ٣-1-2", "Partition ٣", 1, 2, None),
    ],
)
def test_task_name_parsing(name: str, base: str, bucket: int, factor: int, partition: int | None) -> None:
    t = TaskName(name)
    assert (t.base, t.key_bucket, t.factor, t.partition) == (base, bucket, factor, partition)
