"""The soak's plan: rescales to another factor each step, and the input's repartitioning where the issue puts it."""

import random

from hypothesis import given
from hypothesis import strategies as st

from pipelines.demo.soak import FACTORS, memory_trend, plan_steps


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


def test_memory_is_judged_after_the_warm_up_by_each_halfs_median_and_the_slope() -> None:
    flat = [(t * 15.0, 3000.0 if t < 10 else 7000.0 + (t % 3)) for t in range(200)]  # workers start, then a band
    trend = memory_trend(flat, since=150.0)
    assert trend is not None and trend["first_half_median_mib"] == trend["second_half_median_mib"] == 7001.0
    assert abs(trend["slope_mib_per_10min"]) < 1.0, "no growth after the warm-up"
    leak = [(t * 15.0, 7000.0 + t) for t in range(200)]  # 1 MiB every 15 s
    trend = memory_trend(leak, since=0.0)
    assert trend is not None and trend["slope_mib_per_10min"] == 40.0
    assert trend["second_half_median_mib"] - trend["first_half_median_mib"] == 100.0
    assert memory_trend(leak, since=1e9) is None, "too few samples after the warm-up say nothing"
