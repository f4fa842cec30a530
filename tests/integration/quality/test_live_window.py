"""Verifying a job while it runs: a batch committed in the middle of the verification is not a loss."""

from __future__ import annotations

from typing import Any

import pytest

from pipelines.quality import verify
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from tests.integration.runtime.jobs import job, produce

QUIET = lambda message: None  # noqa: E731


def test_a_batch_committed_between_the_window_reads_is_not_reported_lost(
    spark: Any, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    produce(home, "events", 200, keys=10)
    config = job(home, "live", 1, max_records=100)
    run_job(spark, home, config.name, available_now=True, progress=QUIET)
    produce(home, "events", 200, keys=10)  # the running job's next batches

    read_table = verify._table
    committed_meanwhile: list[bool] = []

    def sink_read_then_the_job_commits(home_: Home, name: str) -> Any:
        frame = read_table(home_, name)
        if not committed_meanwhile:  # right after the first sink read, the job commits its next batches
            committed_meanwhile.append(True)
            run_job(spark, home, config.name, available_now=True, progress=QUIET)
        return frame

    monkeypatch.setattr(verify, "_table", sink_read_then_the_job_commits)
    verdict = verify.verify_job(home, config.name)
    assert committed_meanwhile
    assert verdict.ok, verdict.summary()
    assert verdict.records_expected >= 200


def test_a_version_starts_where_its_latest_start_checkpoints_are_not_at_a_superseded_row(home: Home) -> None:
    """A rescale writes v2's migrated start; an in-place switch rewrites it later from v1's final checkpoints."""
    from pipelines.control import ControlPlane
    from pipelines.core.checkpoints import CheckpointMap, partition_floor
    from pipelines.core.ssp import SystemStreamPartition

    def start(offsets: dict[tuple[int, int], str]) -> CheckpointMap:
        return CheckpointMap(2, {SystemStreamPartition("deltalog", "events", p, b): o for (p, b), o in offsets.items()})

    control = ControlPlane(home)
    control.checkpoints.write("job", 2, start({(0, 0): "0", (0, 1): "0", (1, 0): "0", (1, 1): "0"}), batch_id=-1)
    control.checkpoints.write("job", 2, start({(0, 0): "1000", (0, 1): "1000", (1, 0): "900", (1, 1): "950"}), -1)
    starts = partition_floor(control.checkpoints.start("job", 2).items(), int)
    assert starts == {
        SystemStreamPartition("deltalog", "events", 0): "1000",
        SystemStreamPartition("deltalog", "events", 1): "900",
    }
