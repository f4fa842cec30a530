"""A virtual task's description crosses Spark as one cell, and comes back exactly."""

from __future__ import annotations

import pickle

import pytest

from pipelines.runtime.reading import SspRange, TaskRange, describe, described


def test_a_task_range_comes_back_equal_with_the_systems_own_positions() -> None:
    task = TaskRange(
        "/h",
        "j",
        3,
        4,
        "Partition 1 [bucket 2]",
        [SspRange("deltalog.events.1#2", "10", "12", "20"), SspRange("kinesis.s.0#2", "a", "a", {"pin": "x"})],
        {"kinesis": {"region": "us-east-1"}},
        True,
    )
    back = described(describe(task))
    assert back == task
    assert back is not task


def test_a_cell_that_is_not_a_task_range_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"expected a TaskRange.*got dict"):
        described(pickle.dumps({"not": "a task"}))
