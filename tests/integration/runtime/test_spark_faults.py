"""Spark's status tracker, asked as the driver asks it at each batch: a failed task attempt is seen once."""

from __future__ import annotations

from typing import Any

import pytest

from pipelines.runtime.driver import SparkFaults

pytestmark = pytest.mark.slow


def _fails_in_partition_1(index: int, rows: Any) -> Any:
    if index == 1:
        raise RuntimeError("this task fails on purpose")
    return rows


def test_a_failed_task_of_the_groups_job_is_counted_once_and_no_executor_is_lost(spark: Any) -> None:
    context = spark.sparkContext
    faults = SparkFaults(context, "spark-faults-test")
    context.setJobGroup("spark-faults-test", "a job whose second task fails")
    try:
        with pytest.raises(Exception, match="fails on purpose"):
            context.parallelize(range(4), 2).mapPartitionsWithIndex(_fails_in_partition_1).collect()
        context.parallelize(range(4), 2).count()  # a clean job of the same group
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # unset: later jobs ungrouped
    seen = faults.look()
    assert (seen.tasks_failed, seen.executors_lost) == (1, 0)  # local[2]: one attempt per task, the job failed
    assert not faults.look()  # counted once: both jobs ended, nothing new
