"""The fault matrix, each point once: kill -9 at the point, recover as a user would, prove nothing was lost.

``scripts/faults.sh`` runs the same scenarios repeatedly with random kill
moments and prints the table; this module is what CI runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .scenarios import SCENARIOS

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.mark.parametrize("point", sorted(SCENARIOS))
def test_a_kill_at_the_point_loses_duplicates_and_reorders_nothing(point: str, tmp_path: Path) -> None:
    outcome = SCENARIOS[point](tmp_path / "home", None, print)
    assert outcome.killed, f"the fault at {point} never fired"
    assert outcome.problems == [], f"{point}: {outcome}"
    assert (outcome.lost, outcome.duplicated, outcome.order_violations) == (0, 0, 0)
    assert outcome.lock_left is None and outcome.unfinished_events == 0 and outcome.model_in_force
