"""An input that stops answering: wait with bounded, jittered back-off, and say so once in a while, not per try.

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
