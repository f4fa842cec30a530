"""When the input watcher wakes ``repartition_watch``: each finding once, one still left to do again after a while.

The watcher (``pipelines_airflow.watchers``) looks at every job's inputs on
Airflow's triggerer and fires an asset event only when a look finds something
to do, so the DAG runs when an input was repartitioned instead of every minute
(docs/airflow.md, "repartition_watch"). A finding the run settles (an
absorption, a dead holder's lock) stops being found; one that stays, because
the run failed or was killed, is fired again after ``again_s``; a refusal (a
shrink, a non-multiple growth) is said once, not every look, until it changes.
Pure: the watcher's clock and looks come in as values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One thing a look found to do; ``key`` names it with what makes it new (the change, the model, the holder)."""

    key: str
    again: bool  # still found after ``again_s`` since it was fired: fire again (False: a refusal, said once)


class WatchMemory:
    """What the watcher fired and when, so each finding wakes the DAG once, or again only once it is overdue."""

    def __init__(self, again_s: float) -> None:
        if again_s <= 0:
            raise ValueError(f"again_s must be positive, got {again_s}")
        self.again_s = again_s
        self._fired: dict[str, float] = {}

    def due(self, found: Iterable[Finding], now: float) -> list[str]:
        """The keys to fire for this look (sorted), remembered as fired at ``now``; a finding gone is forgotten."""
        found = list(found)
        seen = {f.key for f in found}
        self._fired = {k: t for k, t in self._fired.items() if k in seen}  # back later: it is new again
        due = []
        for f in found:
            last = self._fired.get(f.key)
            if last is None or (f.again and now - last >= self.again_s):
                self._fired[f.key] = now
                due.append(f.key)
        return sorted(set(due))
