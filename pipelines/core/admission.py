"""Admission control: how a micro-batch's record budget is shared among partitions."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def share_budget(backlog: Mapping[K, int], budget: int) -> dict[K, int]:
    """Records to admit per partition: equal shares, and what a short partition leaves goes to the others.

    An equal split alone leaves batches short whenever one partition has less
    waiting than its share (and then a tail batch of a few records), so the
    budget is water-filled: the shortest backlogs are admitted whole, the rest
    share what remains. Never more than a partition's backlog, never more than
    the budget in total.
    """
    admit = dict.fromkeys(backlog, 0)
    waiting = sorted((k for k in backlog if backlog[k] > 0), key=lambda k: backlog[k])
    while waiting and budget > 0:
        share = max(1, budget // len(waiting))
        shortest = waiting[0]
        if backlog[shortest] <= share:
            admit[shortest] = backlog[shortest]
            budget -= backlog[shortest]
            waiting.pop(0)
            continue
        for k in waiting:
            take = min(share, budget)
            admit[k] += take
            budget -= take
        break
    return admit
