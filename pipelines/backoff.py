"""Jittered exponential back-off: the one formula every retry loop of the platform waits with.

The longest wait before retry ``attempt`` doubles from ``base_s`` and stops
at ``cap_s``; the wait itself is drawn below it, in one of two ways, for two
different reasons to wait:

* ``full`` jitter, uniform in ``[0, ceiling]``, for *contention*: producers
  racing for one commit, or readers throttled by one shard's limit, spread
  out instead of colliding again in lockstep (what botocore and the AWS
  architecture guidance use).
* ``equal`` jitter, uniform in ``[ceiling / 2, ceiling]``, for *waiting out an
  outage*: the floor keeps an endpoint that is down from being asked in a hot
  loop, and the waits still spread (``runtime/outage.py`` waits this way
  between batches).

It also runs the loops: ``attempts`` yields attempt numbers and waits between
them (for loops that re-read and decide again), and ``retry`` runs one call
again while the caller's own classification says its error is retriable
(botocore's throttling codes, delta-rs's ``CommitFailedError``). Each client
keeps the words it gives up with; no loop of the platform counts attempts or
sleeps by itself.

The random draw, the sleep and the clock are parameters, so tests check the
bounds without waiting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, TypeVar

Jitter = Literal["full", "equal"]
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How long to wait before retry ``attempt`` (0: the first retry's ceiling is ``base_s``)."""

    base_s: float
    cap_s: float
    jitter: Jitter = "full"
    draw: Callable[[float, float], float] = field(default=random.uniform, repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def ceiling(self, attempt: int) -> float:
        """``base_s * 2**attempt``, at most ``cap_s`` (the exponent is bounded, so a long outage cannot overflow)."""
        return min(self.cap_s, self.base_s * 2.0 ** min(max(attempt, 0), 60))

    def delay(self, attempt: int) -> float:
        """A wait drawn below this attempt's ceiling, with this back-off's jitter."""
        ceiling = self.ceiling(attempt)
        return self.draw(0.0, ceiling) if self.jitter == "full" else self.draw(ceiling / 2, ceiling)

    def wait(self, attempt: int, deadline: float | None = None) -> float:
        """Sleep before retry ``attempt``, never past ``deadline`` (a ``clock`` reading); the seconds slept."""
        seconds = self.delay(attempt)
        if deadline is not None:
            seconds = min(seconds, max(0.0, deadline - self.clock()))
        self.sleep(seconds)
        return seconds

    def attempts(self, count: int | None = None, *, deadline: float | None = None) -> Iterator[int]:
        """Attempt numbers 0, 1, ...: waits before each one but the first, never past ``deadline`` (a ``clock``
        reading), and stops after ``count`` attempts. Past the deadline it goes on without waiting: the caller,
        which knows what it waited for, gives up with its own words (``None``: it returns or raises)."""
        attempt = 0
        while True:
            yield attempt
            if count is not None and attempt + 1 >= count:
                return
            self.wait(attempt, deadline)
            attempt += 1

    def retry(
        self,
        call: Callable[[], T],
        *,
        attempts: int,
        retriable: Callable[[BaseException], bool],
        before_retry: Callable[[BaseException], None] | None = None,
    ) -> T:
        """``call()``, made again (at most ``attempts`` times in all) while it raises an error ``retriable`` accepts;
        the last error, or any other, is raised as it is. ``retriable`` sees every error, the last one too (so it
        may count them); ``before_retry`` runs after the wait (a refresh)."""
        for attempt in self.attempts(attempts):
            try:
                return call()
            except Exception as error:
                if not retriable(error) or attempt + 1 >= attempts:
                    raise
                if before_retry is not None:
                    before_retry(error)
        raise AssertionError("unreachable: the last attempt returns or raises")
