"""A running driver's compaction of its job's states, from a thread of its own so no batch waits for it.

Every ``LOOK_S`` it asks each state of the active model whether a compaction is due (``compaction.due``),
compacts it, and records what it did in the metrics table (``state.<name>.keys``, ``.bytes``, ``.expired``,
``.compaction_s``), which the job's history and the operator's page show.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pipelines.control import ControlPlane
from pipelines.control.metrics import metric
from pipelines.jobs.config import job_config
from pipelines.state.compaction import Compaction, compact, due, summary
from pipelines.state.runtime import tables_for

LOOK_S = 10.0


class StateCompactor(threading.Thread):
    """Compacts the job's states while its driver runs; ``last_round`` once when the run ends."""

    def __init__(self, control: ControlPlane, job: str, progress: Any = print) -> None:
        super().__init__(name=f"state-compactor-{job}", daemon=True)
        self.control, self.job, self.progress = control, job, progress
        self.halt = threading.Event()
        self.started = time.monotonic()
        self.last: dict[str, float] = {}
        self.busy = threading.Lock()

    def run(self) -> None:
        while not self.halt.wait(LOOK_S):
            self.round(force=False)

    def last_round(self) -> None:
        """Fold everything in before the run ends (a small state; a large one as its changes are due), so
        ``current`` holds every committed batch while the job is down."""
        self.halt.set()
        if self.is_alive():
            self.join(timeout=60.0)
        self.round(force=True)

    def round(self, *, force: bool) -> list[Compaction]:
        done: list[Compaction] = []
        with self.busy:
            try:
                model = self.control.job_models.active(self.job)
                for spec in job_config(model).state:
                    tables = tables_for(self.control.home, self.job, spec)
                    now = time.monotonic()
                    if not due(tables, self.last.get(spec.name, self.started), now, ending=force):
                        continue
                    self.last[spec.name] = now
                    found = compact(self.control.home, self.job, spec, model)
                    if found is not None:
                        done.append(found)
                        self._record(found, tables)
            except Exception as e:  # a store outage, a race lost: the next round tries again
                reason = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                self.progress(f"[{self.job}] state compaction failed, tried again in {LOOK_S:.0f} s: {reason}")
        if done:
            self.progress(f"[{self.job}] compacted {summary(done)}")
        return done

    def _record(self, done: Compaction, tables: Any) -> None:
        _, size = tables.size()
        model = self.control.job_models.active_version(self.job) or 0
        figures = {
            "keys": float(done.rows),
            "bytes": float(size),
            "expired": float(done.expired),
            "compaction_s": done.seconds,
            "segment": float(done.segment),
        }
        rows = [metric(self.job, model, -1, None, f"state.{done.state}.{k}", v) for k, v in figures.items()]
        for task, (keys, size) in sorted(done.tasks.items()):
            rows.append(metric(self.job, model, -1, task, f"state.{done.state}.task_keys", float(keys)))
            rows.append(metric(self.job, model, -1, task, f"state.{done.state}.task_bytes", float(size)))
        self.control.metrics.append(rows)
