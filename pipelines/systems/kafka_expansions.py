"""Kafka partition expansions as the platform saw them: the points the hold-back rule needs.

Kafka records no expansion point, and each producer switches to a new
partition count only at its next metadata refresh. So the platform keeps its
own record per cluster and topic in the home
(``<home>/systems/kafka/<cluster id>/<topic>.json``): the count it first saw,
each growth with the time it noticed it, and, once ``expansion_grace_ms`` has
passed, the old partitions' end positions, written once under ``flock``. What
this guarantees and what it does not: docs/systems/kafka.md, "Partition
expansion".
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.core.batchplan import expansion_holds
from pipelines.core.positions import Expansion, Position

DEFAULT_GRACE_MS = 360_000


class ExpansionLog:
    """One topic's partition history as this platform observed it; plain JSON, readable by a human."""

    def __init__(self, root: Path, cluster: str, topic: str) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster) or "cluster"
        self.path = root / "systems" / "kafka" / safe / f"{topic}.json"

    def observe(
        self, count: int, ends: Callable[[], Mapping[int, int]], grace_ms: int, now: datetime | None = None
    ) -> list[Expansion]:
        """Record what ``count`` says, settle due points with ``ends()``; the expansions with their points."""
        now = now or datetime.now(UTC)
        with self._locked() as state:
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
            return [_expansion(e) for e in state["expansions"]]

    def holds(
        self, expansions: list[Expansion], floors: Mapping[int, Position], key: Callable[[Position], Any]
    ) -> set[int]:
        """New partitions not yet readable: their expansion has no points yet, or their source is not past it."""
        held = {p for e in expansions if not e.end_offsets for p in e.new_partitions()}
        settled = [e for e in expansions if e.end_offsets]
        return held | expansion_holds(settled, floors, key)

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = json.loads(self.path.read_text()) if self.path.exists() else {}
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
                    with os.fdopen(fd, "w") as f:
                        json.dump(state, f, indent=2, sort_keys=True)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


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
