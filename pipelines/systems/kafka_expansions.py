"""Kafka partition expansions as the platform saw them: the points the hold-back rule needs.

Kafka records no expansion point, and no single moment is one: every
producer switches to the new partition count when it next refreshes its
metadata (``metadata.max.age.ms``, 5 minutes by default). So the platform
keeps its own record, per cluster and topic, in the home
(``<home>/systems/kafka/<cluster id>/<topic>/``, a ``storage.records.VersionedRecord``):

* the first time it describes a topic it writes the partition count it saw;
* when it later sees more partitions, it writes an expansion with the time it
  noticed (``detected_at``) and a *grace* period (``expansion_grace_ms``,
  default 6 minutes: the default metadata age plus a minute);
* once the grace period is over, the old partitions' end positions at that
  moment become the expansion's *points*, written once (the first writer wins).

The runtime holds a new partition back until its source partition
(``p mod N``) is read past its point; before the points exist it is held
entirely. What this guarantees: per-key order **per producer**, for every
producer that switched to the new count before the grace period ended after
the platform noticed the expansion. Any record such a producer wrote to the
old partition was written before it switched, so it lies before the point,
and is processed before any of its records in the new partition. Not
guaranteed: a producer whose metadata is older than the grace period (raise
``expansion_grace_ms`` to its ``metadata.max.age.ms``), records of one key
written concurrently by two producers (no order exists between them), and an
expansion that happened before the platform first described the topic (there
is nothing to compare with; the job starts on the expanded topic as it is).
The cost: new partitions are not read for the grace period after an
expansion is noticed.

Concurrent describes (the driver, the repartition watch, on any hosts)
change the record by creating its next version, which only one of them can
do, so an observation or a point is written once; the losers read the winner's
record and apply their change to it. A home on object storage needs nothing
more than conditional puts. The grace period is judged by the observer's
clock against the ``detected_at`` another host may have written: a clock
skew of seconds moves the end of a minutes-long grace period by as much.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pipelines.core.batchplan import expansion_holds
from pipelines.core.positions import Expansion, Position
from pipelines.storage.location import Location, parse
from pipelines.storage.objects import store_for
from pipelines.storage.records import VersionedRecord

DEFAULT_GRACE_MS = 360_000


class ExpansionLog:
    """One topic's partition history as this platform observed it; plain JSON, readable by a human.

    A process keeps the last record it read: while the topic's count is what
    it was and no expansion awaits its points, nothing can change the record
    (only a new count or a due point does), so planning a batch costs no read.
    """

    def __init__(self, root: Location | str | os.PathLike[str], cluster: str, topic: str) -> None:
        root = parse(root, what="the home")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster) or "cluster"
        self.folder = root / "systems" / "kafka" / safe / topic
        self.record = VersionedRecord(store_for(root), self.folder)

    def observe(
        self, count: int, ends: Callable[[], Mapping[int, int]], grace_ms: int, now: datetime | None = None
    ) -> list[Expansion]:
        """Record what ``count`` says, settle due points with ``ends()``; the expansions with their points."""
        cached = _SETTLED.get(str(self.folder))
        if cached is not None and cached.get("partitions") == count:
            return [_expansion(e) for e in cached["expansions"]]
        now = now or datetime.now(UTC)

        def change(state: dict[str, Any]) -> dict[str, Any]:
            if state.get("partitions") is None:
                state["partitions"] = count
                state.setdefault("expansions", [])
            elif count > state["partitions"]:
                state["expansions"].append(
                    {
                        "from_partitions": state["partitions"],
                        "to_partitions": count,
                        "detected_at": now.isoformat(),
                        "grace_ms": grace_ms,
                        "points": None,
                    }
                )
                state["partitions"] = count
            pending = [e for e in state["expansions"] if e["points"] is None and _due(e, now)]
            if pending:
                current = ends()
                for e in pending:
                    e["points"] = {str(p): str(current[p]) for p in range(e["from_partitions"]) if p in current}
                    e["settled_at"] = now.isoformat()
            return state

        state = self.record.update(change)
        if all(e["points"] is not None for e in state["expansions"]):
            _SETTLED[str(self.folder)] = state
        return [_expansion(e) for e in state["expansions"]]

    def holds(
        self, expansions: list[Expansion], floors: Mapping[int, Position], key: Callable[[Position], Any]
    ) -> set[int]:
        """New partitions not yet readable: their expansion has no points yet, or their source is not past it."""
        held = {p for e in expansions if not e.end_offsets for p in e.new_partitions()}
        settled = [e for e in expansions if e.end_offsets]
        return held | expansion_holds(settled, floors, key)


_SETTLED: dict[str, dict[str, Any]] = {}
"""Records with every expansion settled, by folder: they change only when the topic's count does."""


def _due(expansion: Mapping[str, Any], now: datetime) -> bool:
    detected = datetime.fromisoformat(expansion["detected_at"])
    return now >= detected + timedelta(milliseconds=int(expansion["grace_ms"]))


def _expansion(e: Mapping[str, Any]) -> Expansion:
    """An expansion for the pure core; one without points has empty ``end_offsets`` (held entirely)."""
    points = e["points"] or {}
    return Expansion(
        e["from_partitions"],
        e["to_partitions"],
        {int(p): str(o) for p, o in points.items()},
        datetime.fromisoformat(e["detected_at"]),
    )
