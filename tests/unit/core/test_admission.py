from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.admission import share_budget


@given(st.dictionaries(st.integers(0, 20), st.integers(0, 10_000), max_size=12), st.integers(1, 50_000))
def test_budget_is_shared_without_overshoot_or_waste(backlog: dict[int, int], budget: int) -> None:
    admit = share_budget(backlog, budget)
    assert set(admit) == set(backlog)
    assert all(0 <= admit[k] <= backlog[k] for k in backlog)
    assert sum(admit.values()) <= budget
    # at most one record per partition is lost to rounding, never a short partition's unused share
    assert sum(admit.values()) >= min(sum(backlog.values()), budget) - len(backlog)


def test_a_short_partition_leaves_its_share_to_the_others() -> None:
    assert share_budget({"a": 10, "b": 10_000}, 1000) == {"a": 10, "b": 990}
    assert share_budget({"a": 12_009, "b": 11_991}, 8000) == {"a": 4000, "b": 4000}
