"""Ctrl-C and kill -9 of the CLI while a Spark driver runs: clean exits, no orphans, nothing half-written.

Real processes throughout: ``python -m pipelines`` started in a session of its
own (as a shell starts a foreground job), ``SIGINT`` sent to its whole process
group (what Ctrl-C does), ``SIGKILL`` to the CLI alone; the drivers are real
``spark-submit`` runs on ``local[1]``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock
from pipelines.runtime import launcher, requests
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from .jobs import SeqProducer, job, produce, sink

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
MASTER = "local[1]"
SPARK_START_S = 240.0  # a JVM and a first query on a loaded 2-core machine


class Cli:
    """One CLI process in its own session, its stdout and stderr in a file (the drivers' output goes there too)."""

    def __init__(self, home: Home, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
        self.log = home.root.local_path().parent / f"cli-{time.monotonic_ns()}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipelines", "--home", str(home.root), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=home.root.local_path().parent,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = SPARK_START_S) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if re.search(pattern, self.text()):
                return
            assert self.proc.poll() is None, (
                f"the CLI ended (rc {self.proc.returncode}) before {pattern!r}:\n{self.text()}"
            )
            time.sleep(0.5)
        raise AssertionError(f"no {pattern!r} within {timeout}s:\n{self.text()}")

    def ctrl_c(self) -> int:
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(timeout=120)


def processes_of(home: Home) -> list[psutil.Process]:
    """Every live process whose command line names this home: CLIs, spark-submit JVMs, Python drivers."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if str(home.root) in " ".join(p.info["cmdline"] or ()) and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def _cmdline(p: psutil.Process) -> str:
    """Spark's short-lived Python workers may end between listing a tree and reading a command line."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def gone_within(home: Home, seconds: float) -> list[psutil.Process]:
    end = time.monotonic() + seconds
    while (left := processes_of(home)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


@pytest.fixture
def cleanup(home: Home) -> Iterator[None]:
    yield
    for p in processes_of(home):  # only this test's processes: their command lines name its home
        with contextlib.suppress(psutil.Error):
            p.kill()


def test_ctrl_c_stops_a_foreground_run_at_a_batch_boundary_and_a_detached_run_outlives_its_cli(
    home: Home, cleanup: None
) -> None:
    produce(home, "events", 60, keys=6)
    config = job(home, "interrupted", 1)
    run = Cli(home, "run", config.name, "--master", MASTER)
    run.wait_for(rf"\[{config.name}\] batch 0: ")
    tree = psutil.Process(run.proc.pid).children(recursive=True)
    assert run.ctrl_c() == 130
    out = run.text()
    assert "Traceback" not in out, out
    assert (
        f"interrupted: stopping job {config.name} at its next batch boundary (Ctrl-C again to kill it at once)\n" in out
    )
    assert re.search(rf"\[{config.name}\] stopped at a batch boundary after [\d.]+s\n", out), out
    assert out.rstrip().endswith("interrupted"), out
    assert psutil.wait_procs(tree, timeout=5)[1] == [], "the driver and its workers ended with the CLI"
    lifecycle = ControlPlane(home).metrics.read(config.name, metrics=["query_started", "query_stopped"])
    assert sorted(lifecycle["metric"]) == ["query_started", "query_stopped"], "the query stopped, and said so"
    assert not requests.stop_asked(home, config.name), "no stop request is left for the next run"

    # the next run starts normally; detached, it outlives the CLI that started it
    produce(home, "events", 60, keys=6)
    detached = Cli(home, "run", config.name, "--detach", "--master", MASTER)
    assert detached.proc.wait(timeout=launcher.START_WAIT_S + 60) == 0, detached.text()
    pid = launcher.running_pid(home, config.name)
    assert pid is not None and f"job {config.name} running as pid {pid}" in detached.text()
    assert ControlPlane(home).drivers.live(config.name), "it returned once the driver had registered"
    end = time.monotonic() + SPARK_START_S
    while len(sink(home, config)) < 120 and time.monotonic() < end:
        time.sleep(1)
    assert psutil.pid_exists(pid), "the detached driver lives on after its CLI exited"
    stop = Cli(home, "stop", config.name)
    assert stop.proc.wait(timeout=180) == 0, stop.text()
    assert f"job {config.name}: stopped" in stop.text()
    rows = sink(home, config)
    assert len(rows) == 120 and not rows.duplicated(["stream", "partition", "offset"]).any()


@pytest.mark.timeout(1500)
def test_ctrl_c_and_kill_9_of_a_rescale_leave_no_lock_no_driver_and_the_next_rescale_proceeds(
    home: Home, cleanup: None
) -> None:
    events = SeqProducer(DeltaLog(home.streams), "events", 2, keys=6)
    events.produce(60)
    config = job(home, "scaled", 1)
    catch_up = rf"\[{config.name}\] model v\d+: factor"

    first = Cli(home, "rescale", config.name, "--factor", "2", "--master", MASTER)
    first.wait_for(catch_up)
    assert first.ctrl_c() == 130
    out = first.text()
    assert "Traceback" not in out, out
    assert f"interrupted: stopping job {config.name} at its next batch boundary" in out
    assert out.rstrip().endswith("interrupted"), out
    assert gone_within(home, 5) == []
    lock = ScalingLock(home).state(config.name)
    assert lock is not None and lock.status == "released", "the interrupted rescale let its lock go"
    [event] = ControlPlane(home).events.history(config.name)
    assert event.finished_at is not None, "its scaling event is closed, not left in flight"

    # kill -9 of the CLI during the catch-up: its spark-submit JVM and Python driver die with it (a backlog for it
    # to catch up: the interrupted run may have read everything, and a job at the inputs' ends gets no run)
    events.produce(60)
    second = Cli(home, "rescale", config.name, "--factor", "4", "--master", MASTER)
    second.wait_for(catch_up)
    tree = psutil.Process(second.proc.pid).children(recursive=True)  # JVM, Python driver, Spark's Python workers
    assert any("driver.py" in _cmdline(p) for p in tree), "the catch-up driver runs"
    second.proc.kill()
    second.proc.wait()
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert alive == [], "no child finishes the catch-up on its own"
    assert gone_within(home, 1) == []

    # the next rescale takes over the dead holder's lock and completes
    third = Cli(home, "rescale", config.name, "--factor", "2", "--master", MASTER)
    assert third.proc.wait(timeout=600) == 0, third.text()
    assert "Traceback" not in third.text()
    assert re.search(rf"job {config.name}: verified, ", third.text()), third.text()
    rows = sink(home, config)
    assert len(rows) == 120 and not rows.duplicated(["stream", "partition", "offset"]).any()
