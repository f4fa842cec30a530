"""The ``drivers`` table on real Delta: a driver's rows from start to stop, read back as its latest state."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path

from pipelines.control import ControlPlane
from pipelines.control.drivers import RECENT_S, STOPPED, Registration
from pipelines.control.table import utc_now
from pipelines.storage.home import Home


def test_a_driver_registers_beats_and_stops_and_the_newest_comes_first(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    first = Registration(home, "job_a", app_id="local-1", master="local[2]")
    first.start()
    first.beat(1, -1)
    first.beat(1, 7)
    first.end()
    second = Registration(home, "job_a", app_id="local-2", master="local[2]")
    second.start()
    second.beat(2, 3)
    Registration(home, "job_b").start()  # another job's driver is not mixed in

    newest, older = ControlPlane(home).drivers.latest("job_a")
    assert newest.driver_id == second.driver_id and older.driver_id == first.driver_id
    assert (newest.state, newest.model_version, newest.batch_id, newest.app_id) == ("running", 2, 3, "local-2")
    assert (older.state, older.batch_id) == (STOPPED, 7)
    assert (newest.host, newest.pid) == (socket.gethostname(), os.getpid())
    assert newest.live(utc_now()) and not older.live(utc_now())
    assert not newest.live(utc_now() + timedelta(seconds=60))  # a driver that stops beating goes silent


def test_a_failure_is_recorded_and_a_long_stopped_job_is_still_found(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    driver = Registration(home, "old_job")
    driver.start()
    driver.end(failure="RuntimeError: the query failed")
    later = utc_now() + timedelta(seconds=3 * RECENT_S)  # nothing in the recent window: the newest file is read
    (found,) = ControlPlane(home).drivers.latest("old_job", now=later)
    assert found.state == "failed" and found.detail == "RuntimeError: the query failed"
    assert ControlPlane(home).drivers.latest("no_such_job") == []
