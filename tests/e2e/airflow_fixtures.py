"""A real Airflow for end-to-end tests: a throwaway home, its database, and api-server + scheduler + dag-processor.

* :func:`configure_airflow_environment` points Airflow at a temporary
  ``AIRFLOW_HOME`` through ``AIRFLOW__...`` environment variables. The e2e
  ``conftest.py`` calls it when it is imported, before anything in the pytest
  process imports ``airflow`` (Airflow reads its configuration once, at import).
  Everything listens on 127.0.0.1 only, and ``PIPELINES_HOME`` points at a
  temporary folder the Airflow tasks share with the tests.
* ``airflow_db`` (session) runs ``airflow db migrate`` once, lazily: only a test
  that needs Airflow pays for it, so ``pytest -m unit`` never does.
* ``running_airflow`` (session) starts ``airflow api-server``, ``airflow
  scheduler``, ``airflow dag-processor`` and ``airflow triggerer`` (the scaling
  path's waits are deferred to it) as subprocesses in their own process
  groups, waits until ``/api/v2/monitor/health`` says the scheduler, the dag
  processor and the triggerer are healthy, and yields an :class:`AirflowClient` holding a JWT
  from ``POST /auth/token``. The processes are killed (SIGTERM, then SIGKILL)
  at the end of the session; if a test failed, the tail of each server log is
  printed.

The plugin and the ``pipelines`` connection type come from the installed
``elastic-pipelines-airflow`` distribution (its entry points), as in
``scripts/airflow.sh``: no plugins folder is configured.

Nothing here binds 0.0.0.0: the api-server gets ``--host 127.0.0.1``, the
scheduler and the triggerer run with ``--skip-serve-logs`` (Airflow's worker and trigger log servers bind
every interface and has no host setting; the api-server reads the task logs
from the shared local log folder instead), and the scheduler's health-check
server stays off (and would bind 127.0.0.1 if turned on).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from pipelines_airflow.sqlite import use_wal

from pipelines.runtime.lifetime import tied_command
from testbed.ports import free_port

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
AIRFLOW_BIN = str(VENV_BIN / "airflow") if (VENV_BIN / "airflow").exists() else "airflow"

LOOPBACK = "127.0.0.1"
ADMIN_USER = "admin"
START_TIMEOUT_S = float(os.environ.get("E2E_AIRFLOW_START_TIMEOUT", "420"))  # cold start on a loaded 2-core box
MIGRATE_TIMEOUT_S = 600.0
DAG_PARSE_TIMEOUT_S = 300.0

__all__ = [
    "AirflowClient",
    "AirflowEnv",
    "airflow_db",
    "configure_airflow_environment",
    "running_airflow",
]


@dataclass
class AirflowEnv:
    """Where the test Airflow lives and how it is reached; filled in by :func:`configure_airflow_environment`."""

    root: Path  # the temporary folder holding everything below
    airflow_home: Path
    pipelines_home: Path
    api_port: int
    password: str
    variables: dict[str, str] = field(default_factory=dict)  # every variable this module set
    keep: bool = False  # keep ``root`` at exit (a test failed, or E2E_KEEP_HOME=1), for its logs and state

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.api_port}"

    @property
    def server_logs(self) -> Path:
        return self.airflow_home / "server-logs"

    def set_api_port(self, port: int) -> None:
        self.api_port = port
        self._apply(_api_variables(port))

    def _apply(self, variables: dict[str, str]) -> None:
        self.variables.update(variables)
        os.environ.update(variables)


_ENV: AirflowEnv | None = None


def configure_airflow_environment() -> AirflowEnv:
    """Point this process (and every child it starts) at a throwaway Airflow; idempotent."""
    global _ENV
    if _ENV is not None:
        return _ENV
    if "airflow" in sys.modules:  # its configuration was read already: in-process Airflow would miss these
        import warnings

        warnings.warn(
            "airflow was imported before tests/e2e/conftest.py set AIRFLOW_HOME; "
            "in-process Airflow uses the earlier configuration (the started servers are not affected)",
            stacklevel=2,
        )
    root = Path(tempfile.mkdtemp(prefix="pipelines-e2e-"))
    atexit.register(_remove_unless_kept, root)
    airflow_home = root / "airflow-home"
    pipelines_home = root / "pipelines-home"
    for path in (airflow_home, pipelines_home):
        path.mkdir()
    password = secrets.token_urlsafe(12)
    passwords_file = airflow_home / "simple_auth_manager_passwords.json"
    passwords_file.write_text(json.dumps({ADMIN_USER: password}))
    env = AirflowEnv(root, airflow_home, pipelines_home, free_port(), password)
    log_port, trigger_log_port = free_port(), free_port()
    env._apply(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "PIPELINES_HOME": str(pipelines_home),
            # what to load
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__LOAD_DEFAULT_CONNECTIONS": "False",
            # embedded default: SQLite + LocalExecutor, small on a 2-core machine
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "pipelines_airflow.sqlite.CONNECT_ARGS",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "pipelines_airflow.sqlite.CONNECT_ARGS_ASYNC",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
            "AIRFLOW__CORE__FERNET_KEY": _fernet_key(),
            # tests: every DAG paused at creation (AirflowClient.trigger unpauses the one it triggers, and a test
            # that triggers a scheduled DAG pauses it again), schedules on (test_schedules unpauses one to see a
            # scheduled run), quick to notice new files and finished tasks
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__CORE__KILLED_TASK_CLEANUP_TIME": "5",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "180",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "240",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # the DAG files do not change during a session: parsed at start, then again only after 5 minutes (a
            # re-parse every 15 s cost the dag-processor ~10% of a core for the whole e2e run)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "0",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "300",
            # heartbeats lag on a loaded machine; "unhealthy" after 30 s would flap
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "120",
            "AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD": "120",
            # loopback only; the worker log server is not started (scheduler --skip-serve-logs), its ports
            # are still made free ones so nothing of ours could ever collide with a real deployment's
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": LOOPBACK,
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(airflow_home / "logs"),
            # one secret for every process, so tokens signed by one are accepted by the others
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # HS512 wants >= 64 bytes
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(64),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__EXPOSE_CONFIG": "False",
            # simple auth manager: one known admin with a known password
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
            # Spark started by tasks binds loopback too
            "SPARK_LOCAL_IP": LOOPBACK,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            **_api_variables(env.api_port),
        }
    )
    _ENV = env
    return env


def _remove_unless_kept(root: Path) -> None:
    if (_ENV is not None and _ENV.keep) or os.environ.get("E2E_KEEP_HOME") == "1":
        print(f"[airflow] kept the e2e homes and logs in {root}", file=sys.stderr)
        return
    shutil.rmtree(root, ignore_errors=True)


def _api_variables(port: int) -> dict[str, str]:
    base = f"http://{LOOPBACK}:{port}"
    return {
        "AIRFLOW__API__HOST": LOOPBACK,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": base,
        # LocalExecutor's task processes talk to the api-server's execution API, not to the database
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
    }


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def airflow_env() -> AirflowEnv:
    if _ENV is None:
        raise RuntimeError("configure_airflow_environment() was not called (tests/e2e/conftest.py does it)")
    return _ENV


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(airflow_env().variables)  # a test's monkeypatch of these must not leak into the servers
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    env.setdefault("PYTHONUNBUFFERED", "1")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO) not in paths:  # DAGs and task processes import ``pipelines`` even without the editable install
        paths.insert(0, str(REPO))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


# --- database -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def airflow_db() -> AirflowEnv:
    """The test Airflow's SQLite database, migrated once per session (only when a test needs it)."""
    env = airflow_env()
    started = time.monotonic()
    try:
        result = subprocess.run(
            [AIRFLOW_BIN, "db", "migrate"],
            env=_child_env(),
            cwd=env.root,
            capture_output=True,
            text=True,
            timeout=MIGRATE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"airflow db migrate did not finish in {MIGRATE_TIMEOUT_S:.0f} s\n{e.stdout}\n{e.stderr}")
    if result.returncode != 0:
        output = f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        pytest.fail(f"airflow db migrate failed ({result.returncode})\n{output}")
    database = env.airflow_home / "airflow.db"
    mode = use_wal(database)  # as scripts/airflow.sh does: readers never block the writer
    print(f"\n[airflow] database migrated in {time.monotonic() - started:.1f} s, journal {mode}: {database}")
    return env


# --- REST client ----------------------------------------------------------------------------------------------------


class AirflowError(AssertionError):
    pass


FINAL_RUN_STATES = {"success", "failed"}


class AirflowClient:
    """The REST API ``/api/v2`` of the running test Airflow, authenticated with a JWT."""

    def __init__(self, env: AirflowEnv, token: str, servers: Servers) -> None:
        self.env = env
        self.base_url = env.base_url
        self.token = token
        self.username = ADMIN_USER
        self.password = env.password
        self.pipelines_home = env.pipelines_home
        self.servers = servers
        self.http = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(60.0)
        )

    # plain requests -----------------------------------------------------------------------------------------------

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, **kwargs)

    def post(self, path: str, json: Any = None, **kwargs: Any) -> httpx.Response:
        return self.http.post(path, json=json, **kwargs)

    def patch(self, path: str, json: Any = None, **kwargs: Any) -> httpx.Response:
        return self.http.patch(path, json=json, **kwargs)

    def json(self, method: str, path: str, expect: int | tuple[int, ...] = (200,), **kwargs: Any) -> Any:
        """A request whose answer must have one of the ``expect`` status codes; its JSON body."""
        response = self.http.request(method, path, **kwargs)
        codes = (expect,) if isinstance(expect, int) else expect
        if response.status_code not in codes:
            raise AirflowError(f"{method} {path} -> {response.status_code}: {response.text[:2000]}")
        return response.json()

    # DAGs and runs --------------------------------------------------------------------------------------------------

    def import_errors(self) -> list[dict[str, Any]]:
        return self.json("GET", "/api/v2/importErrors", params={"limit": 100})["import_errors"]

    def wait_for_dag(self, dag_id: str, timeout: float = DAG_PARSE_TIMEOUT_S) -> dict[str, Any]:
        """Poll until the dag processor has parsed and registered ``dag_id``; fail early on its import error."""
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while True:
            self.servers.check_alive()
            response = self.get(f"/api/v2/dags/{dag_id}")
            if response.status_code == 200:
                print(f"[airflow] DAG {dag_id} registered after {time.monotonic() - started:.1f} s")
                return response.json()
            errors = [e for e in self.import_errors() if dag_id in Path(e.get("filename") or "").stem]
            if errors:
                raise AirflowError(f"DAG {dag_id} does not import:\n" + "\n".join(e["stack_trace"] for e in errors))
            if time.monotonic() > deadline:
                known = [d["dag_id"] for d in self.json("GET", "/api/v2/dags", params={"limit": 100})["dags"]]
                raise AirflowError(
                    f"DAG {dag_id} was not registered within {timeout:.0f} s; registered: {known}; "
                    f"import errors: {[e['filename'] for e in self.import_errors()]}\n"
                    + self.servers.tails(("dag-processor",))
                )
            time.sleep(2)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, *, unpause: bool = True) -> str:
        """Start a manual run of ``dag_id`` with ``conf`` (unpausing the DAG first); its run id."""
        if unpause:
            self.json("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})
        body = {"logical_date": None, "conf": conf or {}}
        run = self.json("POST", f"/api/v2/dags/{dag_id}/dagRuns", expect=(200, 201), json=body)
        print(f"[airflow] triggered {dag_id} run {run['dag_run_id']} with conf {json.dumps(conf or {})}")
        return run["dag_run_id"]

    def pause(self, dag_id: str, paused: bool = True) -> None:
        self.json("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": paused})

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self.json("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        return self.json("GET", path, params={"limit": 100})["task_instances"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 600.0, poll: float = 3.0) -> str:
        """Poll a run until it ends; print each change of its tasks' states, and failed tasks' logs. Its state."""
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        seen: dict[str, str | None] = {}
        state = None
        while True:
            self.servers.check_alive()
            run = self.json("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            state = run["state"]
            tis = self.task_instances(dag_id, run_id)
            for ti in tis:
                if seen.get(ti["task_id"]) != ti["state"]:
                    seen[ti["task_id"]] = ti["state"]
                    print(f"[airflow] {time.monotonic() - started:6.1f} s  {dag_id}.{ti['task_id']}: {ti['state']}")
            if state in FINAL_RUN_STATES:
                break
            if time.monotonic() > deadline:
                print(self.failed_task_logs(dag_id, run_id, tis, all_unfinished=True))
                raise AirflowError(f"run {run_id} of {dag_id} still {state} after {timeout:.0f} s; tasks: {seen}")
            time.sleep(poll)
        print(f"[airflow] run {run_id} of {dag_id}: {state} after {time.monotonic() - started:.1f} s")
        if state != "success":
            print(self.failed_task_logs(dag_id, run_id, tis))
        return state

    def failed_task_logs(
        self, dag_id: str, run_id: str, tis: list[dict[str, Any]] | None = None, *, all_unfinished: bool = False
    ) -> str:
        tis = tis if tis is not None else self.task_instances(dag_id, run_id)
        bad = {"failed", "upstream_failed", "up_for_retry"}
        if all_unfinished:
            bad |= {"running", "queued", "scheduled", None}
        parts = []
        for ti in tis:
            if ti["state"] not in bad or not ti.get("try_number"):
                continue
            parts.append(f"===== log of {dag_id}.{ti['task_id']} try {ti['try_number']} ({ti['state']}) =====")
            parts.append(self.task_log(dag_id, run_id, ti["task_id"], ti["try_number"], ti.get("map_index", -1)))
        return "\n".join(parts) or f"(no task of run {run_id} failed with a log)"

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        response = self.get(path, params={"full_content": "true", "map_index": map_index})
        if response.status_code != 200:
            return f"(log not available: {response.status_code} {response.text[:500]})"
        lines = []
        for item in response.json().get("content", []):
            if isinstance(item, str):
                lines.append(item)
                continue
            text = " ".join(str(item.get(k, "")) for k in ("timestamp", "level", "event") if item.get(k) is not None)
            extra = {k: v for k, v in item.items() if k not in ("timestamp", "level", "event", "logger")}
            lines.append(f"{text} {json.dumps(extra, default=str)}" if extra else text)
        return "\n".join(lines)

    def close(self) -> None:
        self.http.close()


# --- servers --------------------------------------------------------------------------------------------------------

SERVER_COMMANDS: dict[str, list[str]] = {
    "api-server": ["api-server", "--host", LOOPBACK, "--workers", "1"],  # --port added at start
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}


class Servers:
    """The Airflow processes, each the leader of its own process group, logging to a file."""

    def __init__(self, env: AirflowEnv) -> None:
        self.env = env
        self.procs: dict[str, subprocess.Popen[Any]] = {}
        self.logs: dict[str, Path] = {}

    def start(self) -> None:
        self.env.server_logs.mkdir(parents=True, exist_ok=True)
        child_env = _child_env()
        for name, args in SERVER_COMMANDS.items():
            cmd = [AIRFLOW_BIN, *args]
            if name == "api-server":
                cmd += ["--port", str(self.env.api_port)]
            log = self.env.server_logs / f"{name}.log"
            self.logs[name] = log
            with log.open("ab") as out:  # the child keeps its own descriptor
                self.procs[name] = subprocess.Popen(
                    # SIGTERM when this worker dies, even if its controller kills it: the scheduler then stops
                    # its executor's workers too, which a killed scheduler would leave behind
                    tied_command(cmd, signal.SIGTERM),
                    env=child_env,
                    cwd=self.env.root,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AirflowError(f"airflow {name} exited with code {proc.returncode}\n{self.tails()}")

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def tails(self, names: tuple[str, ...] | None = None, lines: int = 60) -> str:
        parts = []
        for name, log in self.logs.items():
            if names is None or name in names:
                parts.append(f"===== tail of airflow {name} log ({log}) =====\n{_tail(log, lines)}")
        return "\n".join(parts)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to each process group, then SIGKILL to the groups and to any descendant that left them."""
        descendants = _descendants([proc.pid for proc in self.procs.values()])  # e.g. a task's spark-submit
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self.procs.values():  # the group too: task processes and uvicorn workers
            _signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for child in descendants:
            with contextlib.suppress(Exception):
                child.kill()
        self.procs.clear()


def _descendants(pids: list[int]) -> list[Any]:
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found += psutil.Process(pid).children(recursive=True)
    return found


def _signal_group(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # start_new_session=True: the group id is the leader's pid


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200 * lines))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(cannot read: {e})"
    return "\n".join(text.splitlines()[-lines:])


def _wait_until_healthy(env: AirflowEnv, servers: Servers, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last: object = "no answer yet"
    while time.monotonic() < deadline:
        servers.check_alive()
        try:
            response = httpx.get(f"{env.base_url}/api/v2/monitor/health", timeout=10)
            last = f"{response.status_code} {response.text[:500]}"
            if response.status_code == 200:
                health = response.json()
                parts = [health.get(k) or {} for k in ("metadatabase", "scheduler", "dag_processor", "triggerer")]
                if all(p.get("status") == "healthy" for p in parts):
                    print(f"[airflow] healthy after {time.monotonic() - started:.1f} s at {env.base_url}")
                    return health
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(2)
    raise AirflowError(f"Airflow was not healthy within {timeout:.0f} s; last answer: {last}\n{servers.tails()}")


def _login(env: AirflowEnv) -> str:
    response = httpx.post(
        f"{env.base_url}/auth/token", json={"username": ADMIN_USER, "password": env.password}, timeout=30
    )
    if response.status_code not in (200, 201):
        raise AirflowError(f"POST /auth/token -> {response.status_code}: {response.text[:1000]}")
    return response.json()["access_token"]


@contextlib.contextmanager
def start_airflow(env: AirflowEnv, timeout: float = START_TIMEOUT_S) -> Iterator[AirflowClient]:
    """Start the servers, wait until healthy, log in; stop them (process groups) on exit."""
    if not _port_is_free(env.api_port):  # taken since the conftest chose it
        env.set_api_port(free_port())
    servers = Servers(env)
    atexit.register(servers.stop)  # an interrupted session may skip the fixture's teardown
    client = None
    try:
        servers.start()
        _wait_until_healthy(env, servers, timeout)
        client = AirflowClient(env, _login(env), servers)
        yield client
    finally:
        if client is not None:
            client.close()
        servers.stop()
        atexit.unregister(servers.stop)


@pytest.fixture(scope="session")
def running_airflow(airflow_db: AirflowEnv, request: pytest.FixtureRequest) -> Iterator[AirflowClient]:
    """A real Airflow (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1 for the whole session.

    Its tasks see ``PIPELINES_HOME`` = ``running_airflow.pipelines_home`` (the session's temporary home):
    tests that drive jobs through Airflow must use that home (and their own job and stream names).
    """
    started = time.monotonic()
    failures_before = request.session.testsfailed
    with start_airflow(airflow_db) as client:
        print(f"[airflow] up in {time.monotonic() - started:.1f} s; logs in {airflow_db.server_logs}")
        yield client
        if request.session.testsfailed > failures_before:
            airflow_db.keep = True
            print("\n" + client.servers.tails(lines=80))
            print(f"[airflow] kept {airflow_db.root} (server logs, task logs, pipelines home) for a look")


def listening_sockets(pids: Callable[[], dict[str, int]] | dict[str, int]) -> list[tuple[str, int, str, int]]:
    """(server, pid, address, port) of every listening TCP socket of the servers and all their descendants."""
    import psutil

    roots = pids() if callable(pids) else pids
    found = []
    for name, pid in roots.items():
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                for conn in proc.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN:
                        found.append((name, proc.pid, conn.laddr.ip, conn.laddr.port))
    return found
