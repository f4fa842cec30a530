"""The soak's plan: rescales to another factor each step, and the input's repartitioning where the issue puts it."""

import random

from hypothesis import given
from hypothesis import strategies as st

from pipelines.demo.soak import FACTORS, plan_steps, same_factor_memory


@given(
    st.integers(1, 60),
    st.sampled_from([30.0, 60.0, 120.0]),
    st.integers(0, 1000),
    st.sampled_from(["deltalog", "kinesis"]),
)
def test_every_step_changes_the_factor_or_the_input(minutes: int, every: float, seed: int, input: str) -> None:
    steps = plan_steps(minutes, every, random.Random(seed), input)
    assert steps[0] == ("start at factor 1", 1, None)
    assert len(steps) == max(3, int(minutes * 60 // every))
    current = 1
    for _label, factor, change in steps[1:]:
        assert (factor is None) != (change is None)
        if factor is not None:
            assert factor in FACTORS and factor != current
            current = factor
    changes = [c for _, _, c in steps if c]
    assert changes == (["expand"] if input == "deltalog" else ["split", "merge"])


def test_thirty_minutes_on_kinesis_split_at_a_third_and_merge_at_two_thirds() -> None:
    steps = plan_steps(30, 120, random.Random(7), "kinesis")
    assert len(steps) == 15
    assert [i for i, (_, _, c) in enumerate(steps) if c] == [5, 10]
    assert steps[5][0].startswith("split") and steps[10][0].startswith("merge")


def test_memory_is_compared_at_the_same_factor_first_visit_against_last() -> None:
    factors = [1, 8, 2, 8, 8, 1]
    memory = [3000.0, 6600.0, 4000.0, 6900.0, None, 3100.0]
    assert same_factor_memory(factors, memory) == {1: (3000.0, 3100.0), 8: (6600.0, 6900.0)}
    assert same_factor_memory([1, 2, 4], [1.0, 2.0, 3.0]) == {}
