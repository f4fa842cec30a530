"""The fault matrix, each point once: kill -9 at the point, recover as a user would, prove nothing was lost.

``scripts/faults.sh`` runs the same scenarios repeatedly with random kill
moments and prints the table; this module is what CI runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .scenarios import SCENARIOS

pytestmark = [pytest.mark.faults, pytest.mark.slow]

AT_CRASH: dict[str, tuple[str, Callable[[dict[str, int]], bool]]] = {
    "mid_batch": ("a batch committed before it: a crash mid-run", lambda at: at["checkpointed_batch"] >= 0),
    "after_sink_commit": (
        "the first batch's rows in the sink and no checkpoint yet",
        lambda at: at["sink_rows"] > 0 and at["checkpointed_batch"] == -1,
    ),
    "after_state_commit": (
        "the first batch's rows in the sink and no checkpoint yet",
        lambda at: at["sink_rows"] > 0 and at["checkpointed_batch"] == -1,
    ),
    "mid_state_write": ("a batch committed before it: a crash mid-run", lambda at: at["checkpointed_batch"] >= 0),
}
"""Where a driver's crash must land for its point to test what it names (``runtime_crash``'s pass run once)."""


@pytest.mark.parametrize("point", sorted(SCENARIOS))
def test_a_kill_at_the_point_loses_duplicates_and_reorders_nothing(point: str, tmp_path: Path) -> None:
    outcome = SCENARIOS[point](tmp_path / "home", None, print)
    assert outcome.killed, f"the fault at {point} never fired"
    if point in AT_CRASH:
        where, landed = AT_CRASH[point]
        assert landed(outcome.at_crash), f"the kill at {point} should leave {where}: it left {outcome.at_crash}"
    assert outcome.problems == [], f"{point}: {outcome}"
    assert (outcome.lost, outcome.duplicated, outcome.order_violations) == (0, 0, 0)
    assert outcome.lock_left is None and outcome.unfinished_events == 0 and outcome.model_in_force
