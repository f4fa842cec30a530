"""``scripts/airflow.sh``: every server it starts listens on loopback, and Ctrl-C or SIGTERM at any moment of its
life (``db migrate``, the wait for the api-server, running) stops everything it started within 10 s, on a loaded
machine, also when the script was started with SIGINT ignored (what a non-interactive shell does to a background
job, e.g. ``scripts/test.sh > log &`` on a CI runner).

Every case starts the script in a new session, like a terminal's foreground job: Ctrl-C is SIGINT to that process
group (``os.killpg``), SIGTERM goes to the script alone (``kill PID``). "Everything it started" is every process
carrying this case's marker in its environment, so a process that left the script's tree is counted too. Two
CPU-bound processes run beside the script from the moment under test until the end: they load the stop, which is
what is tested; loading the minute of start-up before it would only double this file's cost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.airflow_fixtures import START_TIMEOUT_S, free_port

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "::1"}
MARKER = "PIPELINES_AIRFLOW_SH_TEST"
STOP_WITHIN_S = 10.0


@dataclass
class Script:
    proc: subprocess.Popen[bytes]
    log: Path
    marker: str
    sessions: set[int] = field(default_factory=set)  # every session its processes were seen in

    def text(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def _airflow_sh(tmp_path: Path, sigint: signal.Handlers) -> Iterator[Script]:
    """The script with SIGINT set to ``sigint`` on entry; whatever it leaves behind is killed at the end."""
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "PIPELINES_HOME": str(tmp_path / "pipelines"),
        "AIRFLOW_PORT": str(free_port()),
        "SKIP_SETUP": "1",  # the test command installed everything already
        MARKER: marker,
    }
    log = tmp_path / "airflow.sh.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "airflow.sh")],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # like a terminal's foreground job
            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),  # as the launching shell left it
        )
    script = Script(proc, log, marker, {proc.pid})
    try:
        yield script
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in _started_by(script):  # whatever the script failed to stop is stopped here, so no test leaks a server
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


@contextlib.contextmanager
def _cpu_load() -> Iterator[None]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while any(psutil.Process(hog.pid).cpu_times().user < 0.2 for hog in hogs):  # spinning, past start-up
            assert time.monotonic() < deadline, "the CPU-bound processes never ran"
            time.sleep(0.05)
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _started_by(script: Script) -> list[psutil.Process]:
    """Every live process the script started: its descendants, any process with its marker in the environment (also
    one that left the tree), and any process in a session one of them was seen in (also one whose process title
    overwrote its environment, as the api-server's does). A zombie is dead: it waits for its parent to read it."""
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.NoSuchProcess):
        found |= {p.pid: p for p in psutil.Process(script.proc.pid).children(recursive=True)}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):  # gone, or its environment unreadable
            if os.getsid(p.pid) in script.sessions or p.environ().get(MARKER) == script.marker:
                found[p.pid] = p
    for p in found.values():
        with contextlib.suppress(OSError):
            script.sessions.add(os.getsid(p.pid))
    script.sessions.discard(os.getsid(0))  # never this test's own
    return [p for p in found.values() if _alive(p)]


def _cmdline(p: psutil.Process) -> str:
    """A short-lived child (a LocalExecutor worker, a zombie not yet reaped) may vanish between listing and reading."""
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _listening(processes: list[psutil.Process]) -> set[tuple[str, int, str]]:
    found = set()
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    found.add((c.laddr.ip, c.laddr.port, p.name()))
    return found


def _until(condition: Callable[[], bool], script: Script, what: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert script.proc.poll() is None, f"airflow.sh exited before {what}:\n{script.text()}"
        assert time.monotonic() < deadline, f"airflow.sh never reached {what}:\n{script.text()}"
        time.sleep(0.1)


def _running(script: Script, needle: str) -> bool:
    return any(needle in _cmdline(p) for p in _started_by(script))


# The phase under test: reached when its log line is written and its process runs; over when the next line is.
PHASES = {
    "db-migrate": ("[airflow] db migrate", "db migrate", "[airflow] api-server: pid"),
    "api-server-wait": ("[airflow] waiting for the api-server", "monitor/health", "[airflow] ready"),
    "running": ("[airflow] ready", "", ""),
}
# Start-up costs ~half a minute, so the running phase is stopped once per signal kind and the early phases, cheap to
# reach, once each way. SIGINT ignored on entry is the condition that made the script deaf to Ctrl-C under CI.
CASES = [
    pytest.param("db-migrate", signal.SIGINT, True, id="db-migrate-ctrl-c-sigint-ignored-on-entry"),
    pytest.param("db-migrate", signal.SIGTERM, False, id="db-migrate-sigterm-to-script"),
    pytest.param("api-server-wait", signal.SIGINT, False, id="api-server-wait-ctrl-c"),
    pytest.param("api-server-wait", signal.SIGTERM, False, id="api-server-wait-sigterm-to-script"),
    pytest.param("running", signal.SIGINT, True, id="running-ctrl-c-sigint-ignored-on-entry"),
    pytest.param("running", signal.SIGTERM, False, id="running-sigterm-to-script"),
]


@pytest.mark.parametrize(("phase", "stop_signal", "sigint_ignored"), CASES)
def test_airflow_sh_binds_loopback_and_a_signal_stops_everything_it_started(
    tmp_path: Path, phase: str, stop_signal: signal.Signals, sigint_ignored: bool
) -> None:
    line, process, next_line = PHASES[phase]
    sigint = signal.SIG_IGN if sigint_ignored else signal.SIG_DFL
    with _airflow_sh(tmp_path, sigint) as script:
        _until(lambda: line in script.text(), script, f"the line {line!r}")
        _until(lambda: _running(script, process), script, f"a process {process!r}", timeout=30)
        if phase == "api-server-wait":  # nothing that runs tasks before their execution API listens
            names = " ".join(_cmdline(p) for p in _started_by(script))
            assert "scheduler" not in names and "triggerer" not in names, f"started before the api-server: {names}"
        if phase == "running":
            names = " ".join(_cmdline(p) for p in _started_by(script))
            for component in ("api_server", "scheduler", "dag-processor", "triggerer"):
                assert component in names, f"{component} is not running: {names}"
            assert _listening(_started_by(script)), "the api-server listens"
            text = script.text()  # the scheduler was started once the api-server answered, not beside it
            assert text.index("[airflow] the api-server answers") < text.index("[airflow] scheduler: pid"), text
        with _cpu_load():
            started = _started_by(script)
            listening = _listening(started)
            assert {ip for ip, _, _ in listening} <= LOOPBACK, f"a server listens beyond loopback: {listening}"
            assert not {port for _, port, _ in listening} & {8793, 8794}, "no log server is started"

            if stop_signal == signal.SIGINT:
                os.killpg(script.proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals its foreground group
            else:
                script.proc.send_signal(stop_signal)
            signalled = time.monotonic()
            try:
                code = script.proc.wait(timeout=STOP_WITHIN_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"airflow.sh still runs {STOP_WITHIN_S:.0f}s after {stop_signal.name}:\n{script.text()}")
            exited_after = time.monotonic() - signalled
            while left := [p for p in {p.pid: p for p in started + _started_by(script)}.values() if _alive(p)]:
                assert time.monotonic() - signalled < STOP_WITHIN_S, f"still running: {[_cmdline(p) for p in left]}"
                time.sleep(0.1)
            stopped_after = time.monotonic() - signalled

        log = script.text()
        assert code == 128 + stop_signal, f"exit code {code} after {stop_signal.name}:\n{log}"
        assert "[airflow] stopping" in log
        assert " Killed " not in log and " Terminated " not in log, f"bash reported the jobs the stop ended:\n{log}"
        if next_line:
            assert next_line not in log, f"the signal did not stop the {phase} phase:\n{log}"
        if phase == "db-migrate":  # stopped, not waited for (bash defers a trap until a foreground command ends)
            assert "migration done" not in (tmp_path / "airflow" / "logs" / "db-migrate.log").read_text()
        print(f"{phase} {stop_signal.name}: exited after {exited_after:.1f}s, all stopped after {stopped_after:.1f}s")


def test_a_fresh_start_shows_no_failed_run_on_airflows_home_page(tmp_path: Path, browser: Any) -> None:
    """The README's Airflow on fresh homes: its first scheduled runs (started as soon as the DAGs register) end
    without a failure, and Airflow's home page, loaded in a browser, shows no failed DAG."""
    import json
    import re

    import httpx

    with _airflow_sh(tmp_path, signal.SIG_DFL) as script:
        _until(lambda: "[airflow] ready" in script.text(), script, "the line '[airflow] ready'")
        base = re.search(r"\[airflow\] ready: (http://127\.0\.0\.1:\d+)", script.text()).group(1)  # type: ignore[union-attr]
        passwords = json.loads((tmp_path / "airflow" / "simple_auth_manager_passwords.json.generated").read_text())
        token = httpx.post(
            f"{base}/auth/token", json={"username": "admin", "password": passwords["admin"]}, timeout=30
        ).json()["access_token"]
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        deadline = time.monotonic() + 240  # the first scheduled runs, on a loaded 2-core machine
        ended: list[dict[str, Any]] = []
        while True:
            assert script.proc.poll() is None, script.text()
            runs = api.get("/api/v2/dags/~/dagRuns", params={"limit": 100}).json()["dag_runs"]
            ended = [r for r in runs if r["state"] in ("success", "failed")]
            if len({r["dag_id"] for r in ended}) >= 2 and not [r for r in runs if r["state"] in ("queued", "running")]:
                break
            assert time.monotonic() < deadline, f"no two scheduled DAGs ran to their end: {runs}"
            time.sleep(3)
        failed = [(r["dag_id"], r["dag_run_id"]) for r in ended if r["state"] == "failed"]
        assert not failed, f"a fresh start has failed runs: {failed}\n{script.text()}"
        context = browser.new_context(base_url=base, viewport={"width": 1400, "height": 1000})
        try:
            context.add_cookies([{"name": "_token", "value": token, "url": base}])
            page = context.new_page()
            page.goto("/")
            page.get_by_text(re.compile(r"Dags?", re.IGNORECASE)).first.wait_for(timeout=120_000)
            page.wait_for_load_state("networkidle")
            shown = page.locator("body").inner_text()
            print(f"[airflow] home page after {len(ended)} scheduled runs ({sorted({r['dag_id'] for r in ended})}):")
            print(shown[:1500])
            assert re.search(r"\b0\s+Failed Dags\b", shown), shown  # the stats' count, as the issue saw "2 Failed Dags"
            assert not re.search(r"\b[1-9]\d*\s+Failed", shown, flags=re.IGNORECASE), shown
        finally:
            context.close()
            api.close()
            script.proc.send_signal(signal.SIGTERM)  # its own stop ends every component (their groups are their own)
            assert script.proc.wait(timeout=60) == 128 + signal.SIGTERM, script.text()
