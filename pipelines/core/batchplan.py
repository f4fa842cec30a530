"""The batch plan: how far each partition and key bucket may advance in one micro-batch.

Pure (no Spark, no I/O): the Spark source hands in what the input systems
said (floors, ends, limits, backlogs) and gets back every key bucket's end.
Positions are opaque here too; they are only ordered by a ``key`` function
the caller takes from the input system, and a partition's end is chosen by
the system's own ``advance`` (which may answer with a ``Bounded`` end).

Rules, each with a property test in ``tests/unit/core/test_batchplan.py``:

* **The budget is never exceeded**: ``share_budget`` admits at most
  ``budget`` records in total and never more than a partition's backlog.
* **No partition is starved**: every partition with a backlog gets records
  whenever the budget covers one record per such partition; when it does
  not, the partitions that go without rotate from batch to batch.
* **A new partition is never read before its source is past the expansion
  point** (``expansion_holds``; docs/design.md, "Order across repartitioning").
* **The buckets of a partition advance together**: every bucket moves to its
  partition's end, and a bucket already past it stays where it is; so a
  bucket that never receives a record cannot pin its checkpoint in the past.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pipelines.core.positions import Bounded, End, Expansion, Position

K = TypeVar("K", bound=Hashable)
P = TypeVar("P", bound=Hashable)  # a partition's id (the caller's: a number, or a stream and a number)
Key = Callable[[Position], Any]


def share_budget(backlog: Mapping[K, int | None], budget: int, rotation: int = 0) -> dict[K, int]:
    """Records to admit per partition: equal shares, and what a short partition leaves goes to the others.

    An equal split alone leaves batches short whenever one partition has less
    waiting than its share (and then a tail batch of a few records), so the
    budget is water-filled: the shortest backlogs are admitted whole, the rest
    share what remains. A backlog of ``None`` (a system that cannot count,
    e.g. Kinesis) is treated as larger than any share: it gets a full share,
    and a read of "at most that many" finds out how many there are.

    When the budget is smaller than the number of partitions waiting, the
    ones that get a record this batch are chosen by ``rotation`` (the
    caller's batch counter), so none is left behind for ever.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    admit = dict.fromkeys(backlog, 0)
    waiting = [k for k, n in backlog.items() if n is None or n > 0]
    if not waiting or budget == 0:
        return admit
    if budget < len(waiting):
        start = rotation % len(waiting)
        for k in (waiting[start:] + waiting[:start])[:budget]:
            admit[k] = 1
        return admit
    # shortest first; uncountable backlogs last (they take whatever share is left)
    order = sorted(waiting, key=lambda k: (backlog[k] is None, backlog[k] or 0))
    while order and budget > 0:
        share = budget // len(order)
        shortest = order[0]
        size = backlog[shortest]
        if size is not None and size <= share:
            admit[shortest] = size
            budget -= size
            order.pop(0)
            continue
        extra = budget - share * len(order)
        for i, k in enumerate(order):
            admit[k] = share + (1 if i < extra else 0)
        break
    return admit


def expansion_holds(expansions: Iterable[Expansion], floors: Mapping[int, Position], key: Key) -> set[int]:
    """Partitions created by an expansion whose source partition is not yet read past the expansion point.

    ``floors`` are where each partition the job reads stands (its slowest key
    bucket). A key that moved from ``p`` to ``p' = p + k*N`` has its older
    records in ``p`` before ``end_offsets[p]``; reading ``p'`` only once ``p``
    is past that point processes them first. A chain of expansions is held
    link by link: a partition whose source is itself held has a source that
    cannot be past anything. A source the job does not read holds nothing.
    """
    held: set[int] = set()
    for expansion in expansions:
        for partition in expansion.new_partitions():
            source = expansion.source_partition(partition)
            point = expansion.end_offsets.get(source)
            if source in floors and point is not None and key(floors[source]) < key(point):
                held.add(partition)
    return held


def align_buckets(buckets: Mapping[K, Position], end: End, key: Key) -> dict[K, End]:
    """Every bucket of one partition to the partition's end; a bucket already past it keeps its position.

    A ``Bounded`` end cannot be compared before it is read: every bucket gets
    it, and the reader keeps a bucket that is ahead where it is.
    """
    if isinstance(end, Bounded):
        return dict.fromkeys(buckets, end)
    return {b: (pos if key(pos) > key(end) else end) for b, pos in buckets.items()}


@dataclass(frozen=True)
class PartitionView(Generic[K]):
    """What the source knows of one partition when it plans a batch.

    ``buckets`` maps each key bucket's identifier to its position; ``readable``
    is how far the partition may be read now (its end, or a hold-back limit),
    None when it is held back altogether; ``backlog`` is the count of records
    up to there, None when the system cannot count them.
    """

    floor: Position
    buckets: Mapping[K, Position]
    readable: Position | None
    backlog: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def plan_batch(
    partitions: Mapping[P, PartitionView[K]],
    budget: int,
    advance: Callable[[Mapping[P, int]], Mapping[P, End]],
    key: Callable[[P], Key],
    rotation: int = 0,
) -> dict[K, End]:
    """The end of every key bucket in this micro-batch; buckets of partitions that do not move keep their position.

    ``advance`` turns admitted record counts into partition ends (the input
    systems' own operation); ``key(partition)`` is that partition's position
    order. A held partition, or one with nothing to read, is not advanced.
    """
    backlog = {p: v.backlog for p, v in partitions.items() if v.readable is not None}
    admit = {p: n for p, n in share_budget(backlog, budget, rotation).items() if n > 0}
    ends = advance(admit) if admit else {}
    result: dict[K, End] = {}
    for p, view in partitions.items():
        end = ends.get(p)
        if end is None:
            result.update(view.buckets)
        else:
            result.update(align_buckets(view.buckets, end, key(p)))
    return result
