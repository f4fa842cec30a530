"""Spark for integration tests: one local session per test run, a fresh home per test, a standalone cluster.

* ``spark`` — one ``local[2]`` SparkSession for the whole pytest run, built by
  :func:`pipelines.runtime.session.build_session` and warmed up once, because
  on these 2-core machines a session costs 6-13 s and its first Python task
  another ~4 s (measured while these fixtures were written).
* ``home`` — a fresh :class:`~pipelines.control.home.Home` under ``tmp_path``.
* ``spark_standalone`` — a real standalone master and one worker on loopback,
  started from the installed pyspark with ``spark-class``. Its URL is yielded;
  jobs on it must run in a **subprocess** (``spark-submit`` or
  :func:`run_on_cluster`), because one Python process holds one SparkContext
  and the local ``spark`` session may already own it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.control.home import Home
from pipelines.runtime.lifetime import tied_command
from pipelines.runtime.session import PACKAGE_ROOT, build_session, spark_env

__all__ = [
    "TEST_JVM_OPTIONS",
    "MasterUrl",
    "fast_jvm_confs",
    "home",
    "run_on_cluster",
    "spark",
    "spark_standalone",
    "start_standalone",
]

STANDALONE_START_TIMEOUT_S = 90.0  # cold JVMs on a loaded 2-core machine; a start takes 7-17 s here

# C1-only JIT (every session's default since session.JVM_OPTIONS; repeated here so a test driver keeps it even
# where a default is overridden) and the serial GC: on these shared 2-core machines the C2 compiler and parallel
# GC threads compete with the tests for CPU. Measured here under load: session start 16.9/12.8 s -> 11.7/9.5 s,
# first mapInArrow 9.3/7.6 s -> 5.8/5.7 s, a small repeated job ~1.0 s -> ~0.55 s. The serial GC is tests only.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def fast_jvm_confs() -> dict[str, str]:
    """Confs a test driver adds to ``spark_confs()``: the fast-start JVM options for driver and executors."""
    return {"spark.driver.extraJavaOptions": TEST_JVM_OPTIONS, "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS}


# --- local session -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> Iterator[Any]:
    """One ``local[2]`` SparkSession for the whole test run, with our data sources registered and warm workers.

    Started after the session's S3 store (``s3_server``), whose address its environment carries, so a test
    can run a job on an ``s3://`` home in this session as on a local one.

    Do not stop it in a test; streaming tests should stop their own queries.
    """
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    confs = {"spark.sql.warehouse.dir": str(warehouse), "spark.local.dir": str(warehouse / "local"), **fast_jvm_confs()}
    session = build_session("local[2]", "pipelines-tests", **confs)
    _warm_up(session)
    try:
        yield session
    finally:
        for query in session.streams.active:  # a test that forgot its query must not hang the stop
            with contextlib.suppress(Exception):
                query.stop()
        session.stop()
        # py4j closes its last connections from __del__ at interpreter exit, logging each at INFO through a handler
        # whose stream pytest has closed by then: "--- Logging error ---" and a traceback after the summary line.
        # The session is stopped; nothing py4j says from here on is news.
        for name in ("py4j", "py4j.clientserver", "py4j.java_gateway"):  # each logger's own flag: not inherited
            logging.getLogger(name).disabled = True


def _warm_up(session: Any) -> None:
    """Start the Python daemon and one worker per core, with pyarrow and ``pipelines`` imported in each."""

    def identity(batches: Iterator[Any]) -> Iterator[Any]:  # nested: pickled by value, tests/ need not be importable
        import pipelines.core.hashing  # noqa: F401  (what our process functions import first)

        yield from batches

    session.range(0, 4, 1, 4).mapInArrow(identity, "id LONG").collect()


# --- per-test home -------------------------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Home:
    """A fresh, empty deployment home (nothing is created until something writes)."""
    return Home(tmp_path / "home")


# --- standalone cluster --------------------------------------------------------------------------------------------


class MasterUrl(str):
    """A ``spark://host:port`` URL that also knows its master's web UI and the cluster's logs."""

    web_url: str
    log_dir: Path

    def __new__(cls, url: str, web_url: str, log_dir: Path) -> MasterUrl:
        self = super().__new__(cls, url)
        self.web_url = web_url
        self.log_dir = log_dir
        return self

    def state(self, timeout: float = 5.0) -> dict[str, Any]:
        """The master's ``/json/`` view: ``aliveworkers``, ``activeapps``, ``completedapps``, ..."""
        return _master_json(self.web_url, timeout)

    def logs_tail(self, lines: int = 40) -> str:
        """The last lines of the master, worker and executor logs, for error messages."""
        parts = []
        for path in sorted(self.log_dir.glob("*.log")) + sorted(self.log_dir.glob("work/*/*/stderr")):
            parts.append(f"--- {path.relative_to(self.log_dir)} ---\n{_tail(path, lines)}")
        return "\n".join(parts)


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterUrl]:
    """A standalone Spark master plus one worker (1 core, 1 GiB) on 127.0.0.1; yields the master URL.

    The URL is a :class:`MasterUrl` (a ``str``) with ``.web_url``, ``.state()`` and ``.logs_tail()``.
    Run jobs on it from a subprocess — :func:`run_on_cluster` or ``spark-submit --master <url>`` with
    :func:`pipelines.runtime.session.spark_env` — never with a second SparkSession in the pytest process:
    the local ``spark`` fixture's SparkContext would be reused instead. Both JVMs (and the executors and
    Python workers under the worker) are killed by process group at the end of the test session.
    """
    with start_standalone(tmp_path_factory.mktemp("spark-standalone")) as url:
        yield url


@contextlib.contextmanager
def start_standalone(log_dir: Path, timeout: float = STANDALONE_START_TIMEOUT_S) -> Iterator[MasterUrl]:
    """Start master and worker with ``spark-class`` (not the detaching sbin daemons) and stop them on exit."""
    spark_home = _pyspark_home()
    conf_dir = log_dir / "conf"  # empty: no stray spark-env.sh / spark-defaults.conf from the machine
    work_dir = log_dir / "work"  # executors' stdout/stderr; the default would be inside the venv
    conf_dir.mkdir(parents=True, exist_ok=True)
    work_dir.mkdir(exist_ok=True)
    env = spark_env()
    env.update(
        SPARK_HOME=spark_home,
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=TEST_JVM_OPTIONS,
        SPARK_WORKER_DIR=str(work_dir),
    )
    spark_class = str(Path(spark_home) / "bin" / "spark-class")
    master_port, master_web, worker_web = _free_ports(3)
    master_url = f"spark://127.0.0.1:{master_port}"
    url = MasterUrl(master_url, f"http://127.0.0.1:{master_web}", log_dir)

    procs: list[subprocess.Popen[Any]] = []

    def stop() -> None:
        for proc in reversed(procs):  # worker first, so it does not try to reconnect to a dead master
            _kill_group(proc)
        procs.clear()

    atexit.register(stop)  # belt and braces: an interrupted pytest may skip fixture teardown
    try:
        master_cmd = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master_cmd += ["--port", str(master_port), "--webui-port", str(master_web)]
        procs.append(_spawn(master_cmd, env, log_dir / "master.log"))
        worker_cmd = [spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1"]
        worker_cmd += ["--cores", "1", "--memory", "1g", "--webui-port", str(worker_web), "--work-dir", str(work_dir)]
        procs.append(_spawn(worker_cmd, env, log_dir / "worker.log"))
        _wait_for_worker(url, procs, timeout)
        yield url
    finally:
        stop()
        atexit.unregister(stop)


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[Any]:
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            tied_command(cmd),  # it dies with this worker, even if its controller kills it
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for_worker(url: MasterUrl, procs: list[subprocess.Popen[Any]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: object = "no answer yet"
    while time.monotonic() < deadline:
        for proc, role in zip(procs, ("master", "worker"), strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"Spark {role} exited with code {proc.returncode} at start\n{url.logs_tail()}")
        try:
            state = url.state(timeout=2.0)
        except (OSError, ValueError) as e:
            last = e
        else:
            last = {k: state.get(k) for k in ("url", "status", "aliveworkers")}
            if state.get("url") not in (None, str(url)):
                raise RuntimeError(f"port clash: the master at {url.web_url} is {state.get('url')}, not {url}")
            if state.get("aliveworkers", 0) >= 1:
                return
        time.sleep(0.25)
    raise TimeoutError(
        f"Spark standalone worker did not register with {url} within {timeout:.0f} s (last: {last})\n{url.logs_tail()}"
    )


def _kill_group(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM the process group (JVM, executors, Python daemons), then SIGKILL whatever is left.

    The processes were started with ``start_new_session=True``, so the leader's pid is the group id,
    and the group can be signalled even after the leader has exited.
    """
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader: a zombie still counts as a member of the group
            if not _group_alive(pgid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _master_json(web_url: str, timeout: float) -> dict[str, Any]:
    with urllib.request.urlopen(f"{web_url}/json/", timeout=timeout) as response:
        return json.loads(response.read())


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):  # hold all of them open so the n ports differ
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _pyspark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(unreadable: {e})"


# --- running a job on the cluster ----------------------------------------------------------------------------------


def run_on_cluster(
    master: MasterUrl, script: str, *args: str, timeout: float = 120.0, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c script *args`` as a separate Spark driver (environment from ``spark_env()``).

    The script builds its own session against ``master`` (e.g. with ``spark_confs(sys.argv[1])``, plus
    :func:`fast_jvm_confs` passed in as an argument: the script cannot import this module's pytest imports cheaply).
    A non-zero exit or a timeout raises ``AssertionError`` with the script's output and the cluster's
    log tails; on timeout the driver's whole process group (Python and its JVM) is killed.
    """
    argv = [sys.executable, "-c", script, *args]
    env = spark_env()
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd or PACKAGE_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc, grace=5.0)
        out, err = proc.communicate()
        problem = f"driver did not finish within {timeout:.0f} s"
    except BaseException:
        _kill_group(proc, grace=5.0)
        raise
    else:
        if proc.returncode == 0:
            return subprocess.CompletedProcess(argv, 0, out, err)
        problem = f"driver exited with {proc.returncode}"
    raise AssertionError(f"{problem}\nstdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}\n{master.logs_tail()}")
