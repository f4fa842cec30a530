"""An input that stops answering: wait with bounded, jittered back-off, and say so once in a while, not per try;
and outages that were waited out in a call, recorded after the fact (``record_outage``).

Spark asks the source for the next batch's end again as soon as the trigger
allows (at once with a 0 s trigger); an input that fails fast (a refused
connection, a missing table) would turn that into a hot loop of failed
calls and a log line per call. The source keeps one ``InputOutage``: each
failure tells it how long to wait before Spark may ask again (doubling from
``base_s`` to ``cap_s``, full jitter), and whether this failure is worth
reporting (the first, then every ``report_every_s``); the first answer after
an outage tells how long it lasted.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class InputOutage:
    base_s: float = 0.2
    cap_s: float = 5.0
    report_every_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[float, float], float] = random.uniform
    since: float | None = None
    failures: int = 0
    _reported_at: float | None = field(default=None, repr=False)

    def failed(self) -> tuple[float, bool]:
        """A failed call: (seconds to wait before the next try, whether to report it now)."""
        now = self.clock()
        if self.since is None:
            self.since = now
        self.failures += 1
        report = self._reported_at is None or now - self._reported_at >= self.report_every_s
        if report:
            self._reported_at = now
        ceiling = min(self.cap_s, self.base_s * 2 ** min(self.failures - 1, 30))
        return self.jitter(ceiling / 2, ceiling), report

    def answered(self) -> float | None:
        """A call that worked: how long the outage it ends lasted (None: there was none)."""
        if self.since is None:
            return None
        lasted = self.clock() - self.since
        self.since, self.failures, self._reported_at = None, 0, None
        return lasted

    def down_for(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since


STALL_S = 5.0
"""A call to the home's store or an input that took longer than this was held up by an outage, not by work: the
store's and the inputs' small requests answer in milliseconds."""


def record_outage(home: Any, job: str, version: int, seconds: float, what: str) -> None:
    """An outage that was waited out (a read held up, a home that did not answer): recorded after the fact.

    Two rows, the outage's start (down 0 s so far) and its end (how long it
    lasted), the same pair the source writes when it is the one to notice,
    so the views mark it whoever met it first.
    """
    from datetime import timedelta

    from pipelines.control import ControlPlane
    from pipelines.core.metric_names import OUTAGE_BACK, OUTAGE_DOWN

    print(f"[{job}] v{version}: {what} waited {seconds:.1f}s for an answer", flush=True)
    try:
        control = ControlPlane(home)
        now = control.clock.now()  # the store's time, like every row's ``at``
    except Exception as e:  # a report must never take the batch down
        print(f"[{job}] could not record the outage: {e}", flush=True)
        return
    row = {"job": job, "model_version": version, "batch_id": -1}
    rows = [
        {**row, "metric": OUTAGE_DOWN, "value": 0.0, "at": now - timedelta(seconds=seconds)},
        {**row, "metric": OUTAGE_BACK, "value": seconds, "at": now},
    ]
    try:
        control.metrics.append(rows)
    except Exception as e:  # a report must never take the batch down
        print(f"[{job}] could not record the outage: {e}", flush=True)
