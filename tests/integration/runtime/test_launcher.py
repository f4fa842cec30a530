"""The launcher never starts a second driver of a job beside a live one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.control.locks import ScalingLock
from pipelines.errors import PipelinesError
from pipelines.runtime import launcher

from .jobs import job, produce

REPO = Path(__file__).resolve().parents[3]


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


PARENT = """
import subprocess, sys, time
from pipelines.runtime.lifetime import tied_command
child = subprocess.Popen(tied_command(["/bin/sleep", "120"]))
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_tied_child_dies_with_its_killed_parent_an_untied_one_lives_on() -> None:
    import psutil

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for tied in (True, False):
        code = PARENT if tied else PARENT.replace("tied_command(", "(")
        parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        child = psutil.Process(int(parent.stdout.readline()))  # type: ignore[union-attr]
        try:
            end = time.monotonic() + 10
            while child.cmdline() != ["/bin/sleep", "120"] and time.monotonic() < end:
                time.sleep(0.05)  # the shim sets the signal, then exec's the command in its own process
            assert child.cmdline() == ["/bin/sleep", "120"]
            parent.kill()
            parent.wait()
            try:
                child.wait(timeout=5)
                died = True
            except psutil.TimeoutExpired:
                died = False
            assert died is tied
        finally:
            if child.is_running():
                child.kill()


@pytest.mark.slow
def test_an_unreachable_spark_master_is_one_line_and_quick_and_starts_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    produce(home, "events", 10, keys=2)
    config = job(home, "mastered", 1)
    lock_before = ScalingLock(home).state(config.name)
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    message = (
        "error: Spark master spark://127.0.0.1:1 is not reachable (127.0.0.1:1 connection refused); nothing was "
        "started. Start the master, or give another one (--master, or $PIPELINES_SPARK_MASTER for operations), "
        "e.g. local[*] on this machine\n"
    )
    for args, extra in (
        (["run", config.name, "--available-now", "--master", "spark://127.0.0.1:1"], {}),
        (["rescale", config.name, "--factor", "2", "--master", "spark://127.0.0.1:1"], {}),
        (["rescale", config.name, "--factor", "2"], {"PIPELINES_SPARK_MASTER": "spark://127.0.0.1:1"}),
    ):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pipelines", "--home", str(home.root), *args],
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stderr) == (2, message), args
        assert time.monotonic() - started < 20, "refused at once, not after Spark's registration retries"
    assert not (home.root / "run").exists() and not (home.spark_checkpoints / config.name).exists()
    assert ScalingLock(home).state(config.name) == lock_before, "the rescale was refused before it took the lock"
    assert ControlPlane(home).job_models.latest_version(config.name) == 1
