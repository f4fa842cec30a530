"""A standalone Spark cluster across test hosts: the master on one host, a worker on each of others.

Each daemon runs with ``spark-class`` (no detaching sbin scripts) in its own
host, bound to that host's IP (``--host`` and ``SPARK_LOCAL_IP``), with its
scratch and work folders in the host's private ``/tmp``, fixed ports (every
host has a network stack of its own, so nothing clashes) and JVM settings
for a 2-core machine. A driver runs on another host with :func:`run_driver`;
it must advertise an address the workers' executors can reach, which is what
``pipelines.runtime.session`` chooses for a ``spark://`` master.

The cluster owns its hosts: on the way out every one of them is killed whole
and booted again, so no executor, Python worker or JVM outlives it, wherever
Spark reparented it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.hosts import HOST_TMP, Host, HostProcess

MASTER_PORT = 7077
MASTER_WEB_PORT = 8080
WORKER_WEB_PORT = 8081
START_TIMEOUT_S = 180.0  # cold JVMs, several at once, on a loaded 2-core machine
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""C1 only and the serial GC: no C2 compiler or parallel GC threads competing for the 2 cores."""
WORKER_CORES = 1
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
WORK_DIR = str(HOST_TMP / "spark-work")  # in the worker host's own /tmp: executors' stdout, stderr and files


def driver_confs(cores: int) -> dict[str, str]:
    """Confs a test driver adds for this cluster: small JVMs, and no job before ``cores`` cores registered.

    Waiting for every executor makes a job's tasks spread over all workers, which the tests assert.
    """
    return {
        "spark.driver.memory": "512m",
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.driver.extraJavaOptions": JVM_OPTIONS,
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
        "spark.cores.max": str(cores),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    }


@dataclass
class SparkCluster:
    """A running master and its workers; ``url`` is the ``spark://`` URL drivers connect to."""

    master: Host
    workers: list[Host]
    url: str
    procs: list[HostProcess] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """Added to every daemon's environment, e.g. ``S3Server.env()``: executors inherit their worker's, and s3a
    takes its keys from the environment (they are never confs)."""

    def state(self, timeout: float = 10.0) -> dict[str, Any]:
        """The master's ``/json/`` view (``aliveworkers``, ``workers``, ``activeapps``, ``completedapps``, ...).

        Read from inside the master's host: the machine itself is not on the test subnet.
        """
        web = f"http://{self.master.ip}:{MASTER_WEB_PORT}/json/"
        code = "import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=5).read().decode())"
        done = self.master.exec([sys.executable, "-I", "-S", "-c", code, web], timeout=timeout)
        if done.returncode != 0:
            raise OSError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no answer")
        state: dict[str, Any] = json.loads(done.stdout)
        return state

    def logs_tail(self, lines: int = 30) -> str:
        """The last lines of the daemons' logs and of every executor's stderr, for failure messages."""
        parts = [f"--- {p.log_path.name} ---\n{_tail(p.log_path, lines)}" for p in self.procs]
        for host in self.workers:
            if host.alive:
                script = f'for f in {WORK_DIR}/*/*/stderr; do [ -f $f ] && echo "--- {host.name}:$f"'
                script += f" && tail -n {lines} $f; done"
                parts.append(host.exec(["sh", "-c", script], timeout=30).stdout)
        return "\n".join(parts)

    def start_worker(self, host: Host) -> HostProcess:
        """Start a worker (1 core, 1 GiB) on ``host``, e.g. again after the host was killed and booted."""
        cmd = [_spark_class(), "org.apache.spark.deploy.worker.Worker", self.url, "--host", host.ip]
        cmd += ["--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY]
        cmd += ["--webui-port", str(WORKER_WEB_PORT), "--work-dir", WORK_DIR]
        proc = host.run(cmd, {**_daemon_env(host), **self.env}, log_name="spark-worker")
        self.procs = [p for p in self.procs if p.host != host.name or p.poll() is None]  # a killed host's are gone
        self.procs.append(proc)
        if host not in self.workers:
            self.workers.append(host)
        return proc

    def wait_for_workers(self, timeout: float = START_TIMEOUT_S) -> None:
        """Return once exactly the worker hosts' workers are ALIVE at the master."""
        deadline = time.monotonic() + timeout
        last: object = "no answer yet"
        while time.monotonic() < deadline:
            for proc in self.procs:
                host = next(h for h in [self.master, *self.workers] if h.name == proc.host)
                if host.alive and proc.poll() is not None:
                    raise RuntimeError(f"{proc.log_path.name} exited with {proc.returncode}\n{self.logs_tail()}")
            try:
                state = self.state()
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:
                last = e
            else:
                last = alive = sorted(w["host"] for w in state.get("workers", []) if w.get("state") == "ALIVE")
                if alive == sorted(h.ip for h in self.workers):
                    return
            time.sleep(0.5)
        raise TimeoutError(
            f"workers not registered with {self.url} within {timeout:.0f} s ({last})\n{self.logs_tail()}"
        )


@contextlib.contextmanager
def start_spark_cluster(
    master: Host,
    workers: Sequence[Host],
    env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> Iterator[SparkCluster]:
    """Start a master on ``master`` and a worker on each of ``workers``; yield once all registered.

    ``env`` is added to every daemon's environment. On the way out every one of these hosts is killed whole and
    booted again.
    """
    cluster = SparkCluster(master, [], f"spark://{master.ip}:{MASTER_PORT}", env=dict(env or {}))
    try:
        cmd = [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", master.ip]
        cmd += ["--port", str(MASTER_PORT), "--webui-port", str(MASTER_WEB_PORT)]
        cluster.procs.append(master.run(cmd, {**_daemon_env(master), **cluster.env}, log_name="spark-master"))
        for host in workers:
            cluster.start_worker(host)
        cluster.wait_for_workers(timeout)
        yield cluster
    finally:
        for host in [master, *workers]:
            host.kill_all()
            host.boot()


def run_driver(
    host: Host,
    script: str,
    *args: str,
    cluster: SparkCluster | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 240.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c script *args`` as a Spark driver on ``host``; a failure raises with the cluster's logs."""
    try:
        done = host.exec(
            [sys.executable, "-c", script, *args], env={"PYTHONUNBUFFERED": "1", **(env or {})}, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        problem, out, err = f"driver did not finish within {timeout:.0f} s", _text(e.stdout), _text(e.stderr)
    else:
        if done.returncode == 0:
            return done
        problem, out, err = f"driver exited with {done.returncode}", done.stdout, done.stderr
    logs = cluster.logs_tail() if cluster is not None else ""
    raise AssertionError(f"{problem} on {host.name}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-6000:]}\n{logs}")


def _daemon_env(host: Host) -> dict[str, str]:
    return {
        "SPARK_HOME": str(_pyspark_home()),
        "SPARK_CONF_DIR": str(HOST_TMP / "spark-conf"),  # absent: no stray spark-env.sh or spark-defaults.conf
        "SPARK_LOCAL_IP": host.ip,
        "SPARK_LOCAL_DIRS": str(HOST_TMP / "spark-local"),
        "SPARK_WORKER_DIR": WORK_DIR,
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS,
    }


def _spark_class() -> str:
    return str(_pyspark_home() / "bin" / "spark-class")


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(unreadable: {e})"


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")
