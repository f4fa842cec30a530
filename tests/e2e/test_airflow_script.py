"""``scripts/airflow.sh``: every server it starts listens on loopback, and SIGTERM or Ctrl-C stops them all."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.airflow_fixtures import free_port

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "::1"}


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "PIPELINES_HOME": str(tmp_path / "pipelines"),
        "AIRFLOW_PORT": str(free_port()),
        "SKIP_SETUP": "1",  # the test command installed everything already
    }
    log = tmp_path / "airflow.sh.log"
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "airflow.sh")],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        text=True,
        start_new_session=True,  # like a terminal's foreground job: the signal goes to the script
    )
    deadline = time.monotonic() + 240
    while "[airflow] ready" not in log.read_text():
        assert proc.poll() is None, f"airflow.sh exited early:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"airflow.sh never got ready:\n{log.read_text()}"
        time.sleep(1)
    return proc, log


def _cmdline(p: psutil.Process) -> str:
    """A short-lived child (a LocalExecutor worker, a zombie not yet reaped) may vanish between listing and reading."""
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is a NoSuchProcess
        return ""


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _listening(processes: list[psutil.Process]) -> set[tuple[str, int, str]]:
    found = set()
    for p in processes:
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    found.add((c.laddr.ip, c.laddr.port, p.name()))
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_airflow_sh_binds_loopback_and_stops_everything_it_started(tmp_path: Path, stop_signal: int) -> None:
    proc, log = _start(tmp_path)
    started: list[psutil.Process] = []
    try:
        started = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(_cmdline(p) for p in started)
        for component in ("api_server", "scheduler", "dag-processor", "triggerer"):
            assert component in names, f"{component} is not running: {names}"
        listening = _listening(started)
        assert listening, "the api-server listens"
        assert {ip for ip, _, _ in listening} <= LOOPBACK, f"a server listens beyond loopback: {listening}"
        assert not {port for _, port, _ in listening} & {8793, 8794}, "no log server is started"
        proc.send_signal(stop_signal)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in started):
            assert time.monotonic() < deadline, [_cmdline(p) for p in started if _alive(p)]
            time.sleep(0.5)
        assert "[airflow] stopping" in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in started:  # whatever the script failed to stop is stopped here, so no test leaks a server
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
