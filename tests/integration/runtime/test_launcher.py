"""The launcher never starts a second driver of a job beside a live one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipelines.control.home import Home
from pipelines.errors import PipelinesError
from pipelines.runtime import launcher

from .jobs import job, produce


def test_a_second_run_is_refused_while_the_first_driver_lives(home: Home) -> None:
    produce(home, "events", 10, keys=2)
    config = job(home, "once", 1)
    # a live process in the pid file stands for the detached driver (what `run --detach` leaves there)
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        launcher.pid_file(home, config.name).parent.mkdir(parents=True, exist_ok=True)
        launcher.pid_file(home, config.name).write_text(str(first.pid))
        for detach in (True, False):
            with pytest.raises(PipelinesError, match=f"already has a live driver in this home \\(pid {first.pid}\\)"):
                launcher.run(home, config.name, available_now=True, master="local[1]", detach=detach)
        assert first.poll() is None, "the first driver is left running"
    finally:
        first.kill()
        first.wait()
    assert launcher.running_pid(home, config.name) is None
