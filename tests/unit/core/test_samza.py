"""Job models and SSPs in the form Samza's SamzaObjectMapper writes them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.groupers import plan_job_model
from pipelines.core.samza import model_from_samza, model_to_samza, ssp_from_samza, ssp_to_samza
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import ModelError

from .strategies import containers, elastic_groupers, factors, inputs

# SamzaObjectMapper's form of an elastic GroupByPartition job (factor 2, one input of 2 partitions), with this
# platform's task names; released Samza (1.7, 1.8) names these tasks "Partition 0 1" (see docs/samza.md).
SAMZA_MODEL = {
    "config": {
        "job.name": "orders-enricher",
        "job.elasticity.factor": "2",
        "job.systemstreampartition.grouper.factory": (
            "org.apache.samza.container.grouper.stream.GroupByPartitionFactory"
        ),
    },
    "containers": {
        "0": {
            "processor-id": "0",
            "tasks": {
                f"Partition {p}-{b}-2": {
                    "task-name": f"Partition {p}-{b}-2",
                    "system-stream-partitions": [
                        {"system": "kafka", "stream": "orders", "partition": p, "keyBucket": b}
                    ],
                    "changelog-partition": p,
                    "task-mode": "Active",
                }
                for p in range(2)
                for b in range(2)
            },
        }
    },
    "max-change-log-stream-partitions": 2,
}


def test_a_samza_job_model_is_read_with_its_names_buckets_factor_and_grouper() -> None:
    model = model_from_samza(SAMZA_MODEL)
    assert (model.job_name, model.version, model.elasticity_factor, model.grouper) == (
        "orders-enricher",
        1,
        2,
        "GroupByPartition",
    )
    assert model.task_count == 4
    owner = model.ssp_to_task()
    assert owner[SystemStreamPartition("kafka", "orders", 1, 0)].name == "Partition 1-0-2"
    assert {t.task_name.name: t.changelog_partition for t in model.tasks()}["Partition 1-1-2"] == 1


def test_a_model_with_released_samzas_task_names_keeps_them_and_needs_the_factor_from_its_config() -> None:
    import copy

    document = copy.deepcopy(SAMZA_MODEL)
    tasks = document["containers"]["0"]["tasks"]
    document["containers"]["0"]["tasks"] = {
        f"Partition {p} {b}": {**tasks[f"Partition {p}-{b}-2"], "task-name": f"Partition {p} {b}"}
        for p in range(2)
        for b in range(2)
    }
    model = model_from_samza(document)
    assert model.elasticity_factor == 2
    assert model.ssp_to_task()[SystemStreamPartition("kafka", "orders", 1, 0)].name == "Partition 1 0"
    # Samza's names carry no factor: without job.elasticity.factor the buckets cannot be placed, so it is refused
    del document["config"]["job.elasticity.factor"]
    with pytest.raises(ModelError, match="not a key bucket of factor 1"):
        model_from_samza(document)


def test_key_bucket_minus_one_means_no_key_bucket_as_in_samza() -> None:
    whole = ssp_from_samza({"system": "kafka", "stream": "orders", "partition": 3, "keyBucket": -1})
    assert whole == SystemStreamPartition("kafka", "orders", 3)
    assert ssp_to_samza(whole)["keyBucket"] == -1
    checkpoints = CheckpointMap.from_json({"factor": 1, "checkpoints": [{"ssp": ssp_to_samza(whole), "offset": "42"}]})
    assert checkpoints.offsets == {whole: "42"}
    with pytest.raises(ModelError, match="integers >= 0"):
        ssp_from_samza({"system": "kafka", "stream": "orders", "partition": 3, "keyBucket": -2})


def test_a_misspelt_key_bucket_is_refused_not_read_as_the_whole_partition() -> None:
    misspelt = {"system": "kafka", "stream": "orders", "partition": 3, "keybucket": 1}
    with pytest.raises(ModelError, match="unknown key 'keybucket'; Samza's form takes 'system', 'stream'"):
        ssp_from_samza(misspelt)
    row = {"ssp": misspelt, "offset": "42"}
    with pytest.raises(ModelError, match="unknown key 'keybucket'"):
        CheckpointMap.from_json({"factor": 2, "checkpoints": [row]})


def test_a_factor_one_samza_model_without_buckets_is_read() -> None:
    document = {
        "config": {"job.name": "plain"},
        "containers": {
            "0": {
                "container-id": "0",
                "tasks": {
                    "Partition 0": {
                        "task-name": "Partition 0",
                        "system-stream-partitions": [
                            {"system": "kafka", "stream": "orders", "partition": 0, "keyBucket": -1}
                        ],
                        "changelog-partition": "0",
                    }
                },
            }
        },
    }
    model = model_from_samza(document)
    assert model.elasticity_factor == 1 and model.task_count == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("containers"), "containers must be a non-empty object"),
        (lambda d: d["config"].pop("job.name"), "no job name"),
        (lambda d: d["config"].update({"job.name": "../x"}), "job.name: job name '../x' is invalid"),
        (lambda d: d["config"].update({"job.elasticity.factor": "zero"}), "must be a whole number >= 1"),
        (
            lambda d: d["config"].update({"job.elasticity.factor": "²"}),
            "job.elasticity.factor: elasticity factor must be a whole number >= 1, got '²' \\(str\\): write it in "
            "digits 0-9",
        ),
        (
            lambda d: d["config"].update({"job.elasticity.factor": "9" * 5000}),
            "job.elasticity.factor: elasticity factor '9+... \\(5,002 characters\\) is above the maximum 1024$",
        ),
        (
            lambda d: d["containers"]["0"]["tasks"]["Partition 0-0-2"].update({"changelog-partition": "²"}),
            "tasks\\['Partition 0-0-2'\\]: changelog-partition must be an integer below 1,000,000 .* got '²'$",
        ),
        (
            lambda d: d["containers"]["0"]["tasks"]["Partition 0-0-2"].update({"changelog-partition": "9" * 5000}),
            "changelog-partition must be an integer below 1,000,000 .* got '9+... \\(5,002 characters\\)$",
        ),
        (
            lambda d: d["containers"]["0"]["tasks"]["Partition 0-0-2"].update({"changelog-partition": 10**12}),
            "changelog-partition must be an integer below 1,000,000 .* got 1000000000000$",
        ),
        (
            lambda d: d["config"].update({"job.elasticity.factor": "4"}),
            "key bucket 2 of \\[kafka, orders, 0\\] is read by no task",
        ),
        (
            lambda d: d["containers"]["0"]["tasks"].pop("Partition 0-1-2"),
            "key bucket 1 of \\[kafka, orders, 0\\] is read by no task",
        ),
    ],
)
def test_a_broken_samza_model_is_refused_saying_where(change, message) -> None:
    import copy

    document = copy.deepcopy(SAMZA_MODEL)
    change(document)
    with pytest.raises(ModelError, match=message):
        model_from_samza(document)


def test_task_names_with_overlong_numbers_are_not_read_as_numbers() -> None:
    """``int()`` of 5,000 digits raises ValueError; such a name is no virtual task's, and its factor no factor."""
    import copy

    document = copy.deepcopy(SAMZA_MODEL)
    del document["config"]["job.elasticity.factor"]
    tasks = document["containers"]["0"]["tasks"]
    document["containers"]["0"]["tasks"] = {
        f"{name}-0-{'9' * 25}": {**task, "task-name": f"{name}-0-{'9' * 25}"} for name, task in tasks.items()
    }
    with pytest.raises(ModelError, match=r"the task names' factor: elasticity factor 9{25} is above the maximum 1024"):
        model_from_samza(document)
    document["containers"]["0"]["tasks"] = {
        f"Partition 0-0-{'9' * 5000}": {**next(iter(tasks.values())), "task-name": f"Partition 0-0-{'9' * 5000}"}
    }
    with pytest.raises(ModelError, match="not a key bucket of factor 1"):  # no factor in its name: factor 1
        model_from_samza(document)


@settings(max_examples=40)
@given(inputs(), factors, elastic_groupers, containers)
def test_every_model_survives_a_round_trip_through_samzas_form(streams, factor, grouper, count) -> None:
    model = plan_job_model("roundtrip", 1, streams, factor=factor, grouper=grouper, containers=count)
    back = model_from_samza(model_to_samza(model))
    assert back.ssp_to_task() == model.ssp_to_task()
    assert back.elasticity_factor == model.elasticity_factor
    assert {t.task_name: t.changelog_partition for t in back.tasks()} == {
        t.task_name: t.changelog_partition for t in model.tasks()
    }
