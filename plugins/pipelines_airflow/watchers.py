"""The input watcher: ``repartition_watch`` runs when a job's input was repartitioned, not every minute.

An Airflow asset watcher (event-driven scheduling): :class:`InputChangeTrigger`
runs on the triggerer, looks at every job's inputs each ``poll_s`` (the same
``repartition.findings`` a run acts on) and fires an event on
:data:`INPUT_CHANGES` only when a look finds something to do, which the
scheduler turns into a run of the DAG. Run every minute instead, the DAG made a
run of skipped tasks each minute there was nothing to absorb (docs/airflow.md,
"repartition_watch").

The trigger only reads; the run it wakes looks again and acts. What it fired
is kept in memory (``WatchMemory``): a triggerer that restarts may fire once
more for a finding still there, and the run then finds it again, or nothing.
The looks are blocking (delta-rs, the input systems' clients), so each runs in
a thread, as the scaling waits' do.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

POLL_S = 20.0
"""Between looks: a look opens each job's active model and asks each input system its partition count."""
AGAIN_S = 300.0
"""An absorption or a settle still found this long after it was fired (its run failed or was killed) is fired again."""


class InputChangeTrigger(BaseEventTrigger):
    """Fires ``{"found": [...]}`` each time a look finds something new to do, or something overdue; runs forever."""

    def __init__(
        self, *, conn_id: str = "pipelines_default", home: str = "", poll_s: float = POLL_S, again_s: float = AGAIN_S
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.conn_id = conn_id
        self.home = home  # "": the connection's (else PIPELINES_HOME), resolved at each look as the tasks do
        self.poll_s = float(poll_s)
        self.again_s = float(again_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"conn_id": self.conn_id, "home": self.home, "poll_s": self.poll_s, "again_s": self.again_s},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from pipelines.core.input_watch import WatchMemory

        memory = WatchMemory(self.again_s)
        failing = ""
        while True:
            try:
                found = await asyncio.to_thread(self._look)
            except Exception as e:  # the store or an input system did not answer: look again at the next poll
                if f"{type(e).__name__}: {e}" != failing:  # said once per kind of failure, not every poll
                    failing = f"{type(e).__name__}: {e}"
                    self.log.warning("a look at the jobs' inputs failed: %s", failing)
            else:
                failing = ""
                due = memory.due(found, time.monotonic())
                if due:
                    self.log.info("found: %s", "; ".join(due))
                    yield TriggerEvent({"found": due})
            await asyncio.sleep(self.poll_s)

    def _look(self) -> list[Any]:
        from pipelines.operations import repartition
        from pipelines.storage.home import resolve_home
        from pipelines_airflow.hooks import PipelinesHook

        return repartition.findings(resolve_home(self.home) if self.home else PipelinesHook(self.conn_id).home())


INPUT_CHANGES = Asset(
    name="pipelines_input_changes",
    uri="pipelines://inputs/partition_counts",
    group="pipelines",
    watchers=[AssetWatcher(name="pipelines_input_watcher", trigger=InputChangeTrigger())],
)
"""Updated when the watcher finds an input whose partition count differs from its job's active model."""
