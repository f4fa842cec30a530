"""The batch plan's rules as properties: budget, fairness, expansion hold-back, buckets moving together."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import assume, given
from hypothesis import strategies as st

from pipelines.core.batchplan import PartitionView, align_buckets, expansion_holds, plan_batch, share_budget
from pipelines.core.positions import Bounded, Expansion

backlogs = st.dictionaries(st.integers(0, 15), st.integers(0, 10_000) | st.none(), max_size=12)


@given(backlogs, st.integers(0, 50_000), st.integers(0, 100))
def test_the_budget_is_never_exceeded_nor_a_backlog(backlog: dict[int, int | None], budget: int, rotation: int) -> None:
    admit = share_budget(backlog, budget, rotation)
    assert set(admit) == set(backlog)
    assert sum(admit.values()) <= budget
    for p, n in admit.items():
        assert n >= 0
        if backlog[p] is not None:
            assert n <= backlog[p]


@given(backlogs, st.integers(0, 50_000), st.integers(0, 100))
def test_no_waiting_partition_is_starved_when_the_budget_covers_one_record_each(
    backlog: dict[int, int | None], budget: int, rotation: int
) -> None:
    waiting = [p for p, n in backlog.items() if n is None or n > 0]
    assume(budget >= len(waiting))
    admit = share_budget(backlog, budget, rotation)
    assert all(admit[p] > 0 for p in waiting)


@given(st.integers(2, 12), st.integers(1, 11))
def test_a_small_budget_rotates_over_the_waiting_partitions(partitions: int, budget: int) -> None:
    assume(budget < partitions)
    backlog = dict.fromkeys(range(partitions), 1_000)
    served: set[int] = set()
    for rotation in range(partitions):
        admit = share_budget(backlog, budget, rotation)
        assert sum(admit.values()) == budget
        served |= {p for p, n in admit.items() if n}
    assert served == set(range(partitions))


@given(backlogs, st.integers(1, 50_000))
def test_the_budget_is_used_up_while_records_wait(backlog: dict[int, int | None], budget: int) -> None:
    admit = share_budget(backlog, budget)
    counted = [n for n in backlog.values() if n is not None]
    if any(n is None for n in backlog.values()):
        assert sum(admit.values()) == budget  # an uncountable backlog takes whatever is left
    else:
        assert sum(admit.values()) == min(budget, sum(counted))


def _expansion(points: dict[int, int], to: int) -> Expansion:
    return Expansion(len(points), to, {p: str(o) for p, o in points.items()}, datetime(2026, 1, 1, tzinfo=UTC))


@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(2, 3),
            st.lists(st.integers(0, 100), min_size=n, max_size=n),
            st.lists(st.integers(0, 120), min_size=n, max_size=n),
        )
    )
)
def test_a_new_partition_is_held_until_its_source_is_past_the_expansion_point(case: tuple) -> None:
    n, k, points, progress = case
    expansion = _expansion(dict(enumerate(points)), n * k)
    floors = {p: str(progress[p]) for p in range(n)} | {p: "0" for p in range(n, n * k)}
    held = expansion_holds([expansion], floors, int)
    for new in range(n, n * k):
        source = new % n
        assert (new in held) == (progress[source] < points[source])
    assert all(p >= n for p in held), "old partitions are never held"


def test_a_chain_of_expansions_is_held_link_by_link() -> None:
    first = _expansion({0: 10}, 2)  # 1 -> 2
    second = _expansion({0: 30, 1: 5}, 4)  # 2 -> 4: partition 3 comes from 1, which came from 0
    floors = {0: "10", 1: "0", 2: "0", 3: "0"}
    assert expansion_holds([first, second], floors, int) == {2, 3}  # 2: 0 not past 30; 3: 1 not past 5
    floors = {0: "30", 1: "5", 2: "0", 3: "0"}
    assert expansion_holds([first, second], floors, int) == set()


@given(st.dictionaries(st.integers(0, 7), st.integers(0, 100), min_size=1), st.integers(0, 100))
def test_buckets_of_a_partition_advance_together_and_never_go_back(buckets: dict[int, int], end: int) -> None:
    aligned = align_buckets({b: str(o) for b, o in buckets.items()}, str(end), int)
    for b, position in aligned.items():
        assert int(position) == max(buckets[b], end)


def test_a_bounded_end_goes_to_every_bucket() -> None:
    end = Bounded("5", 100)
    assert align_buckets({0: "5", 1: "9"}, end, int) == {0: end, 1: end}


@given(
    st.dictionaries(
        st.integers(0, 5),
        st.tuples(st.integers(0, 50), st.integers(0, 300), st.booleans(), st.integers(1, 4)),
        min_size=1,
    ),
    st.integers(0, 1_000),
)
def test_the_plan_keeps_every_rule_at_once(parts: dict[int, tuple[int, int, bool, int]], budget: int) -> None:
    views = {}
    for p, (floor, backlog, held, factor) in parts.items():
        buckets = {(p, b): str(floor + (b % 2)) for b in range(factor)}  # some buckets start one ahead
        readable = None if held else str(floor + backlog)
        views[p] = PartitionView(str(floor), buckets, readable, backlog)

    def advance(admit: dict) -> dict:
        return {p: str(int(views[p].floor) + n) for p, n in admit.items()}

    plan = plan_batch(views, budget, advance, lambda p: int)
    moved = 0
    for view in views.values():
        ends = {plan[b] for b in view.buckets}
        if view.readable is None:
            assert all(plan[b] == view.buckets[b] for b in view.buckets), "a held partition does not move"
            continue
        new_floor = min(int(plan[b]) for b in view.buckets)
        assert int(view.floor) <= new_floor <= int(view.readable) or new_floor == int(view.floor)
        moved += new_floor - int(view.floor)
        for b in view.buckets:
            assert int(plan[b]) >= int(view.buckets[b]), "no bucket goes back"
        assert len({e for e in ends if int(e) > int(view.floor) + 1}) <= 1, "buckets of a partition move together"
    assert moved <= budget
