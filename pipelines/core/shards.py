"""Kinesis shards to SSP slots: which slot reads which shard, and when a child shard may be read.

A Kinesis stream is resharded while it lives (a split closes one shard and
opens two, a merge closes two and opens one), but a job model has a fixed
number of partitions. Following the Kinesis consumer proposal, each stream
gets as many **slots** (the job model's integer partitions) as it had open
shards when the job model was planned, and a ``ShardPartitionMapper`` decides
which shards each slot reads. This module is that mapper, pure: it sees the
stream's shard listing and what the slots' checkpoints say, and nothing else.

A slot's state is a mapping ``shard id -> shard state``, the shard state being
``TRIM_HORIZON`` (taken over, nothing read yet), a sequence number (the last
record read; opaque here, only the Kinesis system compares them) or
``SHARD_END`` (read to its end). A slot's checkpoint is exactly this mapping
(``pipelines.systems.kinesis.positions`` encodes it), so **the mapping is
recoverable from the checkpointed positions alone**: a restart, or another
process, sees the same slots, the mapper derives the same decisions, and
nothing else needs to be stored (no DynamoDB lease table).

Rules (each one a property test in ``tests/unit/core/test_shards.py``)

* **Parent before child** (KCL's rule): a child shard is taken over only when
  every parent is *done*: read to its end and that end checkpointed
  (``SHARD_END`` in a slot's checkpoint), or retired (see below), or no longer
  listed by the stream (expired: it blocks nothing, as KCL treats a missing
  parent lease). At least one parent must be known done through the
  checkpoints, so a shard whose lineage the checkpoints do not show (another
  slot's shard, when the caller passed only some slots) is never taken.
* **A dead end is never taken again**: a closed shard none of whose children
  is listed any more is done, and so are its ancestors (``dead_ends``). Its
  children expired, so its own records are past retention; and if it was
  read, the expired child was the only link from the checkpoints back to it,
  so without this rule it would look unread (an orphan) and be read twice.
* **A parent leaves a slot only when all its children are in checkpoints.**
  ``SHARD_END`` stays in the slot's checkpoint, as the evidence that the
  parent is done, until every child of it is in some slot's checkpoint; only
  then does a plan drop it. So a shard that is in no slot but has a
  descendant in one (or is a dead end, or has one as descendant) is *retired*
  (done), and any other shard in no slot is still to be read: the checkpoints
  and the listing alone tell the two apart, even when the slots of one
  micro-batch were not committed together.
* **Free slots first, then sharing (1:n).** A slot is free when it has no
  unfinished shard (empty, or only ``SHARD_END`` evidence). A child goes to a
  free slot, preferring the one that held its parent (a lineage stays in one
  slot where it can); when no slot is free it shares the least loaded slot,
  whose position then holds several shards (the composite position).
* **Slots never exceed the job's count**: the mapper only uses the slots it is
  given; ``relayout`` places the same shards on a new count (the 1:1 model
  after a reshard) without reading anything twice or skipping anything.
* **Deterministic**: the same listing and the same slots give the same plan,
  whatever the order of the inputs; shards are ordered by the start of their
  hash key range, then by id.

What if a parent's end was trimmed before it was read
    The parent is still in its slot, unfinished, so its children stay
    blocked; the reader finds its next records trimmed and fails loudly
    (``StreamError`` naming the stream, the shard and the missing range). Once
    the parent expires (no longer listed) nothing proves it done, so its
    children are not taken either: the job stays stopped until an operator
    decides (the Kinesis system's ``on_trimmed: skip`` reads on from the trim
    horizon, reporting the loss; ``relayout`` adopts orphans). Records are
    never skipped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.errors import StreamError

TRIM_HORIZON = "TRIM_HORIZON"
"""A shard taken over and not read yet: the next read starts at its oldest record."""
SHARD_END = "SHARD_END"
"""A closed shard read to its end (the reader saw no next iterator), and checkpointed so."""

SlotShards = Mapping[str, str]
"""One slot's state: shard id -> ``TRIM_HORIZON``, the last sequence number read, or ``SHARD_END``."""


@dataclass(frozen=True, order=True)
class ShardInfo:
    """What the stream lists about one shard; ``hash_start`` orders shards by their place in the key space."""

    hash_start: int
    shard_id: str
    parents: tuple[str, ...] = ()
    open: bool = True


@dataclass(frozen=True)
class SlotPlan:
    """What one slot does before its next read: shards it takes over, finished shards it drops."""

    take: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.take or self.drop)

    def to_json(self) -> str:
        """Canonical text, carried unchanged in ``Bounded.plan`` from the driver to the executor."""
        if not self:
            return ""
        return json.dumps({"drop": sorted(self.drop), "take": sorted(self.take)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SlotPlan:
        if not text:
            return cls()
        try:
            value = json.loads(text)
            return cls(tuple(str(s) for s in value.get("take", ())), tuple(str(s) for s in value.get("drop", ())))
        except (ValueError, AttributeError, TypeError) as error:
            raise StreamError(f"not a Kinesis slot plan: {text!r:.200}") from error


def apply_plan(shards: SlotShards, plan: SlotPlan) -> dict[str, str]:
    """A slot's state after its plan: taken shards at ``TRIM_HORIZON``, dropped ones gone.

    Idempotent, so a replayed or repeated plan changes nothing more: a shard
    already in the slot is not taken again, and only ``SHARD_END`` shards are
    ever dropped.
    """
    result = {s: v for s, v in shards.items() if not (s in plan.drop and v == SHARD_END)}
    for shard in plan.take:
        if shard not in shards:
            result[shard] = TRIM_HORIZON
    return result


@dataclass
class _View:
    """The slots as the mapper reasons about them: who holds what, what is done."""

    assigned: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    retired: set[str] = field(default_factory=set)


class ShardPartitionMapper:
    """Decisions over one stream's shard listing; build a new one whenever the listing is read again."""

    def __init__(self, shards: Iterable[ShardInfo]) -> None:
        self.shards: dict[str, ShardInfo] = {}
        for shard in shards:
            if shard.shard_id in self.shards:
                raise StreamError(f"shard {shard.shard_id!r} is listed twice")
            self.shards[shard.shard_id] = shard
        self._children: dict[str, list[str]] = {}
        for shard in sorted(self.shards.values()):
            for parent in shard.parents:
                self._children.setdefault(parent, []).append(shard.shard_id)

    # ------------------------------------------------------------ lineage

    def children(self, shard_id: str) -> tuple[str, ...]:
        """Listed shards that name ``shard_id`` as a parent (also when the parent itself is no longer listed)."""
        return tuple(self._children.get(shard_id, ()))

    def open_shards(self) -> list[str]:
        return [s.shard_id for s in sorted(self.shards.values()) if s.open]

    def roots(self) -> list[str]:
        """Listed shards none of whose parents are listed: where a reader of the whole stream starts."""
        return [s.shard_id for s in sorted(self.shards.values()) if not any(p in self.shards for p in s.parents)]

    def dead_ends(self) -> list[str]:
        """Closed listed shards none of whose children is listed any more: done, whatever the slots say.

        A shard closes only by a reshard that opens its children, and a child
        closes later than its parent, so it expires no earlier: a listing that
        shows a closed shard without any of its children shows one whose records
        are past retention too (the listing lags, or caught the stream between
        two expiries). It cannot be unread work. Treating it so would re-take a
        shard that was read and dropped, because the expired child was the only
        link from the slots' checkpoints back to it (KCL likewise creates leases
        only for open shards and their ancestors, so such a shard gets none).
        """
        return [s.shard_id for s in sorted(self.shards.values()) if not s.open and not self.children(s.shard_id)]

    def _order(self, shard_id: str) -> tuple[int, str]:
        info = self.shards.get(shard_id)
        return (info.hash_start if info else -1, shard_id)

    def _view(self, slots: Mapping[int, SlotShards]) -> _View:
        view = _View()
        for slot in sorted(slots):
            for shard, state in slots[slot].items():
                other = view.assigned.setdefault(shard, slot)
                if other != slot:
                    raise StreamError(
                        f"shard {shard!r} is in the checkpoints of slots {other} and {slot}; a shard is read by "
                        "one slot only, so these checkpoints were not written by this job's model"
                    )
                if state == SHARD_END:
                    view.finished.add(shard)
        # Every ancestor of a shard in a slot was done when that shard was taken over. A dead end (closed, no
        # child listed any more) is done as well, and so are its ancestors: its lineage to the slots expired.
        stack = list(view.assigned)
        seen: set[str] = set()
        for dead_end in self.dead_ends():
            seen.add(dead_end)
            stack.append(dead_end)
        while stack:
            info = self.shards.get(stack.pop())
            for parent in info.parents if info else ():
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        view.retired = seen - set(view.assigned)
        return view

    def _done(self, shard_id: str, view: _View) -> bool:
        return shard_id in view.finished or shard_id in view.retired or shard_id not in self.shards

    def _eligible(self, view: _View, *, adopt_orphans: bool = False) -> list[str]:
        """Shards to take over now: in no slot, not retired, every parent done, one of them known done."""
        result = []
        for info in sorted(self.shards.values()):
            shard = info.shard_id
            if shard in view.assigned or shard in view.retired:
                continue
            if not all(self._done(p, view) for p in info.parents):
                continue
            known = any(p in view.finished or p in view.retired for p in info.parents)
            if known or adopt_orphans:
                result.append(shard)
        return result

    # ------------------------------------------------------------ decisions

    def initial_layout(self, count: int) -> dict[int, dict[str, str]]:
        """A new job's slots: the stream's roots (its oldest listed shards), from their trim horizon."""
        slots: dict[int, dict[str, str]] = {i: {} for i in range(_check_count(count))}
        for shard in self.roots():
            slot = min(slots, key=lambda i: (_unfinished(slots[i]), i))
            slots[slot][shard] = TRIM_HORIZON
        return slots

    def plan(self, slots: Mapping[int, SlotShards]) -> dict[int, SlotPlan]:
        """What every slot does before its next read, decided with every slot's checkpoint in view.

        ``slots`` must hold every slot of the stream in the job: a shard in a
        slot the mapper was not shown looks unread.
        """
        view = self._view(slots)
        takes: dict[int, list[str]] = {i: [] for i in slots}
        load = {i: _unfinished(slots[i]) for i in slots}
        for child in self._eligible(view):
            parents = {view.assigned[p] for p in self.shards[child].parents if p in view.assigned}
            slot = self._choose(load, parents)
            takes[slot].append(child)
            load[slot] += 1
        plans = {}
        for slot in sorted(slots):
            drop = [
                shard
                for shard, state in slots[slot].items()
                if state == SHARD_END and all(c in view.assigned or c in view.retired for c in self.children(shard))
            ]
            plans[slot] = SlotPlan(tuple(takes[slot]), tuple(sorted(drop, key=self._order)))
        return plans

    def relayout(self, slots: Mapping[int, SlotShards], count: int) -> dict[int, dict[str, str]]:
        """The same shards on ``count`` slots (the 1:1 model after a reshard), from the old slots' checkpoints.

        Every shard keeps its state, so nothing is read twice or skipped;
        children whose parents are done are taken over at once and their done
        parents dropped (the new model's start checkpoints are written in one
        commit); children still waiting for a parent keep waiting. Listed
        shards nobody reads and nothing proves read (orphans, see the module
        docstring) are adopted from their trim horizon: relayout sees every
        slot, so an orphan here really is unread.
        """
        union: dict[str, str] = {}
        for state in slots.values():
            union.update(state)
        view = self._view(slots)
        for child in self._eligible(view, adopt_orphans=True):
            union[child] = TRIM_HORIZON
        view = self._view({0: union})
        for shard in list(union):
            if union[shard] == SHARD_END and all(c in view.assigned or c in view.retired for c in self.children(shard)):
                del union[shard]
        result: dict[int, dict[str, str]] = {i: {} for i in range(_check_count(count))}
        unfinished = [s for s in union if union[s] != SHARD_END]
        evidence = [s for s in union if union[s] == SHARD_END]
        for shard in sorted(unfinished, key=self._order):
            slot = min(result, key=lambda i: (_unfinished(result[i]), i))
            result[slot][shard] = union[shard]
        for shard in sorted(evidence, key=self._order):
            slot = min(result, key=lambda i: (_unfinished(result[i]), len(result[i]), i))
            result[slot][shard] = union[shard]
        return result

    def status(self, slots: Mapping[int, SlotShards]) -> dict[str, dict[str, Any]]:
        """Every listed shard's lineage and where it stands, for people (the Airflow page, ``describe``)."""
        view = self._view(slots)
        eligible = set(self._eligible(view))
        result: dict[str, dict[str, Any]] = {}
        for info in sorted(self.shards.values()):
            shard = info.shard_id
            if shard in view.assigned:
                state = "finished" if shard in view.finished else "reading"
            elif shard in view.retired:
                state = "retired"
            elif shard in eligible:
                state = "ready"
            elif all(self._done(p, view) for p in info.parents):
                state = "orphan"  # nothing in the checkpoints leads to it
            else:
                state = "waiting for parents"
            result[shard] = {
                "parents": list(info.parents),
                "children": list(self.children(shard)),
                "open": info.open,
                "slot": view.assigned.get(shard),
                "state": state,
            }
        return result

    @staticmethod
    def _choose(load: Mapping[int, int], parent_slots: set[int]) -> int:
        """A free slot (a parent's first), else the least loaded one (a parent's first among equals)."""
        return min(load, key=lambda i: (load[i] > 0, load[i], i not in parent_slots, i))


def _unfinished(shards: SlotShards) -> int:
    return sum(1 for state in shards.values() if state != SHARD_END)


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise StreamError(f"a Kinesis stream needs at least one slot, got {count!r}")
    return count
