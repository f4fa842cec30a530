"""Where an in-place switch's downtime goes, phase by phase (docs/operations.md, "Where a switch's time goes").

The driver knows when the old query stopped, when the new model's checkpoints were carried forward, when the new
query's ``start()`` returned and when it saw the first batch with data running; Spark's progress report of that
batch says when its trigger began and how long its planning took (the source's ``latestOffset`` in the source
runner, the offset log's write). The phases are written once that batch's report is there, after processing
resumed, so recording them adds nothing to the downtime they measure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipelines.core.metric_names import SWITCH_PHASES


@dataclass
class SwitchTimeline:
    """The wall-clock times (``time.time()``) of one switch, filled in as the driver goes through it."""

    stopped: float
    carried: float | None = None
    started: float | None = None
    """The new query let go: its ``start()`` returned, or (``ahead``) the gate it was started behind opened."""
    resumed: float | None = None
    ahead: bool = False
    recorded: bool = False

    def phases(self, reports: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
        """The phases in seconds, once the report of the first batch with data is among ``reports`` (Spark's
        ``recentProgress``, oldest first); None before that."""
        if self.carried is None or self.started is None or self.resumed is None:
            return None
        first = next((r for r in reports if r.get("numInputRows", 0) > 0), None)
        if first is None:
            return None
        took = first.get("durationMs") or {}
        trigger = datetime.fromisoformat(str(first["timestamp"]).replace("Z", "+00:00")).timestamp()
        planned = trigger + took.get("latestOffset", 0) / 1000.0
        # A query started ahead began its first trigger before its gate opened, and waited there: its
        # start-up is no part of the downtime, and its plan counts from the gate's opening.
        phases = {
            "switch.started_ahead": 1.0 if self.ahead else 0.0,
            "switch.carry_s": self.carried - self.stopped,
            "switch.start_s": self.started - self.carried,
            "switch.first_trigger_s": max(0.0, trigger - self.started),
            "switch.plan_s": planned - max(trigger, self.started),
            "switch.offset_log_s": took.get("walCommit", 0) / 1000.0,
            "switch.first_batch_s": took.get("triggerExecution", 0) / 1000.0,
            "switch.downtime_s": self.resumed - self.stopped,
        }
        assert set(phases) == set(SWITCH_PHASES)
        return phases
