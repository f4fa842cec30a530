"""The scaling path's waits on Airflow's triggerer: no worker slot is held while a job switches or catches up.

A rescale may wait for the job's scaling lock, held by another operation
(up to ``lock_wait_s``, 600 s by default), and then waits twice: for a live driver to start the new model in its Spark
application (up to ``restart_timeout_s``, 300 s by default) and for the new
model to reach the inputs' ends as of its activation (``catch_up_timeout_s``,
600 s). As plain tasks those waits held a worker slot each, and the
repartition watch maps the path over every job whose input grew. Here the
task looks once, and if the condition does not hold yet it defers to
:class:`ScalingWaitTrigger`: the triggerer polls the control plane (the same
one-look functions the CLI's synchronous ``rescale`` polls:
``scaling.switch_state`` and ``scaling.catch_up_state``), and the task resumes
on a worker when the trigger fires.

The trigger only reads. Writing what it found (the event's status, the catch-up
time) is left to the task when it resumes, so a trigger that runs twice (a
triggerer that died and one that took its triggers over) changes nothing twice,
and the lease is renewed by the task on its way in and out, as every step does.

Its deadline is measured on the clock of the triggerer that runs it: a trigger
moved to another triggerer waits its whole timeout again, which can make a wait
longer, never shorter (no two hosts' clocks are compared).

The control-plane reads are blocking (delta-rs, the input systems' clients), so
each look runs in a thread (``asyncio.to_thread``): the triggerer's event loop,
shared by every trigger it runs, never waits on one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

LOCK = "lock"
SWITCH = "switch"
CATCH_UP = "catch up"
POLL_S = 2.0
"""Between looks: the driver commits a batch (and its metrics) about every trigger interval, and beats every 10 s."""

# The statuses of the event a trigger fires with.
LOCK_FREE, SWITCHED, DRIVER_GONE, CAUGHT_UP = "lock free", "switched", "driver gone", "caught up"
TIMED_OUT = "timed out"
WAITS = (LOCK, SWITCH, CATCH_UP)


class ScalingWaitTrigger(BaseTrigger):
    """Polls one condition of a scaling operation until it holds or ``timeout_s`` has passed; fires once.

    ``wait`` is ``"lock"`` (the job's scaling lock is free, expired, held by a
    process known dead, or ``owner``'s; fires ``lock free``: the task then
    tries to take it, and may defer again if another was faster), ``"switch"``
    (the job's live driver started ``version``; fires ``switched`` or
    ``driver gone``) or ``"catch up"`` (``version``'s committed checkpoints
    reached ``target``; fires ``caught up``). Either fires
    ``timed out`` at the deadline, with the records left when countable and the
    last error a look raised, if any (a look that fails is retried at the next
    poll: a store that does not answer for a while is waited out, not fatal).
    """

    def __init__(
        self,
        *,
        home: str,
        job: str,
        version: int,
        wait: str,
        timeout_s: float,
        target: dict[str, dict[str, str]] | None = None,
        poll_s: float = POLL_S,
        owner: str = "",
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if wait not in WAITS:
            raise ValueError(f"unknown wait {wait!r}: one of {', '.join(map(repr, WAITS))}")
        self.home = home
        self.job = job
        self.version = int(version)
        self.wait = wait
        self.timeout_s = float(timeout_s)
        self.target = target or {}
        self.poll_s = float(poll_s)
        self.owner = owner

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "home": self.home,
                "job": self.job,
                "version": self.version,
                "wait": self.wait,
                "timeout_s": self.timeout_s,
                "target": self.target,
                "poll_s": self.poll_s,
                "owner": self.owner,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.monotonic()
        looks, behind, error = 0, None, None
        while True:
            looks += 1
            try:
                found = await asyncio.to_thread(self._look)
            except Exception as e:  # the store or an input system did not answer: look again at the next poll
                error = f"{type(e).__name__}: {e}"
                self.log.warning("look %d at %s of %s v%d failed: %s", looks, self.wait, self.job, self.version, error)
            else:
                status, behind = found
                if status is not None:
                    yield self._event(status, started, looks, behind)
                    return
            if time.monotonic() - started >= self.timeout_s:
                yield self._event(TIMED_OUT, started, looks, behind, error)
                return
            await asyncio.sleep(self.poll_s)

    def _look(self) -> tuple[str | None, int | None]:
        """One blocking look at the control plane (run in a thread): the status to fire, or None to keep waiting."""
        from pipelines.operations import scaling
        from pipelines.storage.home import resolve_home

        home = resolve_home(self.home)
        if self.wait == LOCK:
            from pipelines.control.locks import ScalingLock, dead_process_owner

            lock = ScalingLock(home).state(self.job)
            if lock is None or not lock.held or lock.owner == self.owner or dead_process_owner(lock.owner):
                return LOCK_FREE, None
            return None, None
        if self.wait == SWITCH:
            state = scaling.switch_state(home, self.job, self.version)
            return {scaling.Switch.SWITCHED: SWITCHED, scaling.Switch.DRIVER_GONE: DRIVER_GONE}.get(state), None
        done, behind = scaling.catch_up_state(home, self.job, self.version, self.target)
        return (CAUGHT_UP if done else None), behind

    def _event(
        self, status: str, started: float, looks: int, behind: int | None, error: str | None = None
    ) -> TriggerEvent:
        waited = round(time.monotonic() - started, 3)
        self.log.info("%s of %s v%d: %s after %.1fs", self.wait, self.job, self.version, status, waited)
        payload = {"status": status, "waited_s": waited, "looks": looks, "behind": behind, "error": error}
        return TriggerEvent(payload)
