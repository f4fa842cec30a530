"""Kafka partition expansions as the platform saw them: the points the hold-back rule needs.

Kafka records no expansion point, and each producer switches to a new
partition count only at its next metadata refresh. So the platform keeps its
own record per cluster and topic in the home
(``<home>/systems/kafka/<cluster id>/<topic>/``, a ``storage.records.VersionedRecord``):
the count it first saw, each growth with the time it noticed it, and, once
``expansion_grace_ms`` has passed, the old partitions' end positions, written
once: a change creates the record's next version, which exactly one of racing
writers (the driver, the repartition watch, on any hosts) can do. What this
guarantees and what it does not: docs/systems/kafka.md, "Partition expansion".

The grace period is a duration judged across hosts (one process notices the
growth, another may settle it), so ``detected_at`` and the settling process's
now are both the store's time (``storage.clock``), never two hosts' clocks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pipelines.core.batchplan import expansion_holds
from pipelines.core.positions import Expansion, Position
from pipelines.storage.clock import StoreClock, store_clock
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
        self.clock: StoreClock = store_clock(root)

    def observe(
        self, count: int, ends: Callable[[], Mapping[int, int]], grace_ms: int, now: datetime | None = None
    ) -> list[Expansion]:
        """Record what ``count`` says, settle due points with ``ends()``; the expansions with their points."""
        cached = _SETTLED.get(str(self.folder))
        if cached is not None and cached.get("partitions") == count:
            return [_expansion(e) for e in cached["expansions"]]
        now = now or self.clock.now()

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
