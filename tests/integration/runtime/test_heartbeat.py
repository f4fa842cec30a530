"""The driver's heartbeat: its own thread beats while the driver's loop is busy, and stops when it is stuck."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from deltalake import DeltaTable

from pipelines.control import ControlPlane
from pipelines.runtime import driver
from pipelines.storage.home import Home

from .jobs import job, produce

pytestmark = pytest.mark.integration


def _beats(control: ControlPlane) -> list[float]:
    frame = control.metrics.read("beating", metrics=["heartbeat"])
    return sorted(float(v) for v in frame["value"]) if len(frame) else []


def test_the_heartbeat_goes_on_while_the_loop_is_busy_and_stops_when_it_is_stuck(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(driver, "STUCK_S", 1.0)
    control = ControlPlane(home)
    beat = driver.Heartbeat(control, "beating")
    beat.version, beat.batch = 3, 7
    beat.ensure_started()  # the first beat is written at once
    try:
        assert len(_beats(control)) >= 1
        beat.progress()
        time.sleep(0.8)  # the loop is busy (a stop at a batch boundary): the thread beats on
        busy = len(_beats(control))
        assert busy >= 3, f"{busy} beats in a busy 0.8 s, one every 0.1 s asked"
        time.sleep(3.5)  # the loop has not come round for longer than STUCK_S (and a slow append has landed)
        stuck = len(_beats(control))
        time.sleep(1.5)
        assert len(_beats(control)) == stuck, "no beat from a driver stuck longer than STUCK_S"
        beat.progress()  # the loop comes round again
        time.sleep(1.5)
        assert len(_beats(control)) > stuck, "beats resume with the loop"
    finally:
        beat.halt.set()
        beat.join(5)
    rows = control.metrics.read("beating", metrics=["heartbeat"])
    assert set(rows["model_version"]) == {3} and set(rows["batch_id"]) == {7}


def test_a_beat_after_the_driver_ended_does_not_make_it_live(home: Home) -> None:
    """The thread may come round once more on the driver's way out; after its end the registration writes nothing."""
    from pipelines.control.drivers import Registration
    from pipelines.operations.scaling.readings import last_heartbeat

    control = ControlPlane(home)
    registration = Registration(home, "beating")
    registration.start()
    registration.beat(1, -1)
    beat = last_heartbeat(control, "beating")
    assert beat is not None and beat["live"] and beat["driver_id"] == registration.driver_id
    registration.end(model_version=1, batch_id=4)
    registration.beat(1, 5)  # the heartbeat thread, one last time
    beat = last_heartbeat(control, "beating")
    assert beat is not None and beat["age_s"] < 5 and not beat["live"] and beat["state"] == "stopped"


def test_a_run_that_ends_on_its_own_compacts_its_jobs_control_tables(
    spark: Any, home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    """The microbatch DAG's available-now runs, minutes apart, each end long before the heartbeat's 10-minute round:
    without a round at each run's end, their job's control tables grew a file per batch and beat for ever."""
    produce(home, "events", 40, 4)
    job(home, "short", 1)
    control = ControlPlane(home)
    for b in range(60):  # the files earlier short runs left: one per append
        control.metrics.append([{"job": "short", "model_version": 1, "batch_id": b, "metric": "records", "value": 1}])
    metrics = DeltaTable(str(home.control_table("metrics")))

    def files() -> int:
        metrics.update_incremental()
        return len(metrics.file_uris(file_pruning_predicate=[("job", "=", "short")]))

    before = files()
    assert before >= 60
    driver.run_job(spark, home, "short", available_now=True, progress=lambda m: None)
    said = re.search(r"\[short\] compacted control tables: .*metrics (\d+) -> (\d+) files", capsys.readouterr().out)
    assert said is not None, "the run's last round says what it compacted"
    assert int(said[1]) >= before and int(said[2]) == 1
    assert files() == 1, "the job's metric files are one after the run"
    assert len(control.metrics.read("short", metrics=["records"])) >= 60, "the rows are all there"
