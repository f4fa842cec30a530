"""Starting and stopping job drivers: ``pipelines run`` and ``pipelines stop``.

A job runs as its own Spark application through ``spark-submit`` (so any
master works: ``local[*]`` by default, ``spark://host:7077`` or a cluster
manager by flag). A stop is a request the driver honours at its next batch
boundary, so stopping never cuts a micro-batch short.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.errors import PipelinesError, by_name
from pipelines.runtime import logs
from pipelines.runtime.lifetime import check_master, tied_command
from pipelines.runtime.requests import failure_note, stop_request
from pipelines.runtime.session import spark_confs, spark_env

DRIVER = str(Path(__file__).with_name("driver.py"))
INTERRUPT_GRACE_S = 60.0  # a Ctrl-C'd driver gets this long to stop at a batch boundary


def default_master() -> str:
    """``PIPELINES_SPARK_MASTER``, else ``local[*]``: where drivers launched by operations run."""
    return os.environ.get("PIPELINES_SPARK_MASTER") or "local[*]"


def spark_submit() -> str:
    beside = Path(sys.executable).parent / "spark-submit"
    found = str(beside) if beside.exists() else shutil.which("spark-submit")
    if not found:
        raise PipelinesError("spark-submit is not on PATH; install pyspark (scripts/setup.sh does) or add Spark's bin/")
    return found


def driver_command(
    home: Home, job: str, *, available_now: bool, master: str, max_seconds: float | None = None
) -> list[str]:
    cmd = [spark_submit(), "--master", master]
    for key, value in spark_confs(master).items():
        if key != "spark.master":
            cmd += ["--conf", f"{key}={value}"]
    cmd += [DRIVER, "--home", str(home.root), "--job", job, "--master", master]
    if available_now:
        cmd.append("--available-now")
    if max_seconds is not None:
        cmd += ["--max-seconds", str(max_seconds)]
    return cmd


def pid_file(home: Home, job: str) -> Path:
    return home.root / "run" / f"{job}.pid"


def run(
    home: Home, job: str, *, available_now: bool, master: str, detach: bool, max_seconds: float | None = None
) -> int:
    """Run the job's driver; in the foreground returns its exit code, detached returns its pid."""
    ControlPlane(home).job_models.active(job)  # an unknown job fails here, with the known jobs listed
    check_master(master)  # a dead master is one line now, not a minute of JVM retries
    live = running_pid(home, job)
    if live is not None:
        raise PipelinesError(
            f"job {job!r} already has a live driver in this home (pid {live}); stop it first "
            f"(python -m pipelines stop {job}) or let it run"
        )
    (home.root / "run").mkdir(parents=True, exist_ok=True)
    stop_request(home, job).unlink(missing_ok=True)
    failure_note(home, job).unlink(missing_ok=True)
    cmd = driver_command(home, job, available_now=available_now, master=master, max_seconds=max_seconds)
    if not detach:
        return _foreground(home, job, cmd, master)
    log = open(home.root / "run" / f"{job}.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(cmd, env=spark_env(master), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pid_file(home, job).write_text(str(proc.pid))
    return proc.pid


def _foreground(home: Home, job: str, cmd: list[str], master: str) -> int:
    """Run the driver tied to this process; Ctrl-C stops it at a batch boundary, then re-raises.

    The driver runs in its own session, so a Ctrl-C to the terminal's process
    group reaches only this process, which turns it into the same stop request
    ``pipelines stop`` makes: the query stops between micro-batches and nothing
    is cut half way. A second Ctrl-C, or a driver that does not stop within
    ``INTERRUPT_GRACE_S``, ends it the hard way (what a crash would, which the
    sink and the checkpoints survive). If this process is killed, the driver is
    killed with it (``lifetime.tied_command``).
    """
    # spark-submit forwards the Python driver's stdout and stderr to its stdout: the driver's own lines, which go
    # to this process's stderr (fd 2: an Airflow task's sys.stderr has no file), so stdout keeps only the CLI's
    # own answer (one JSON object with --json). Its stderr is the JVM's log: the home's log file unless the
    # libraries' lines should show (--verbose, an Airflow task: runtime.logs).
    log = logs.submit_stderr()
    try:
        proc = subprocess.Popen(tied_command(cmd), env=spark_env(master), start_new_session=True, stdout=2, stderr=log)
    finally:
        if log is not None:
            log.close()  # the child has its own descriptor
    try:
        return proc.wait()
    except KeyboardInterrupt:
        request = stop_request(home, job)
        request.parent.mkdir(parents=True, exist_ok=True)
        request.touch()
        sys.stderr.write(
            f"interrupted: stopping job {job} at its next batch boundary (Ctrl-C again to kill it at once)\n"
        )
        sys.stderr.flush()
        try:
            proc.wait(timeout=INTERRUPT_GRACE_S)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            request.unlink(missing_ok=True)
        raise


def stop(home: Home, job: str, *, wait: bool = True, timeout: float = 120.0) -> bool:
    """Ask the job's driver to stop at its next batch boundary; True once it has exited (or none ran)."""
    ControlPlane(home).job_models.active(job)
    request = stop_request(home, job)
    request.parent.mkdir(parents=True, exist_ok=True)
    request.touch()
    pid = _pid(home, job)
    if not wait or pid is None:
        return pid is None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            pid_file(home, job).unlink(missing_ok=True)
            return True
        time.sleep(0.2)
    return False


def running_pid(home: Home, job: str) -> int | None:
    """The pid of this home's detached driver of ``job`` if it is still alive (local drivers only)."""
    pid = _pid(home, job)
    return pid if pid is not None and _alive(pid) else None


def kill(home: Home, job: str) -> None:
    """The hard way (tests and emergencies): SIGKILL the driver's whole process group."""
    pid = _pid(home, job)
    if pid is not None and _alive(pid):
        os.killpg(pid, signal.SIGKILL)


def _pid(home: Home, job: str) -> int | None:
    try:
        return int(pid_file(home, job).read_text())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def failure(home: Home, job: str) -> PipelinesError | None:
    """The platform error the job's last driver failed with (``failure_note``), as its own class, or None."""
    try:
        note = json.loads(failure_note(home, job).read_text())
    except (OSError, ValueError):
        return None
    return by_name(str(note.get("error")), str(note.get("message")))
