"""Starting and stopping job drivers: ``pipelines run`` and ``pipelines stop``.

A job runs as its own Spark application through ``spark-submit`` (so any
master works: ``local[*]`` by default, ``spark://host:7077`` or a cluster
manager by flag). A stop is a request the driver honours at its next batch
boundary, so stopping never cuts a micro-batch short.

A pid means something only on the host that started the process (another
host's pid 3 may be a kernel thread here). The pid file of a detached driver
holds ``<host> <pid> <start time>``, and a pid is looked up or signalled only
by that host, and only while the process of that pid is the one that started
then (pids are reused); a file naming another host, or no host (written by an
older version), is never judged. Drivers on other hosts are found, stopped and waited for
through the control plane: the stop request they poll, and their
registration in the ``drivers`` table, which says ``stopped`` when they have.

``pipelines run --detach`` returns once its driver has registered in that
table (its Spark application is up), or fails if the driver exits first: like
spark-submit or an Airflow operator, a detached submit that says "running"
must mean it runs, and a master or a conf the JVM refuses must be an error
now, not a line found later in the driver's log (``start``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pipelines.control import ControlPlane
from pipelines.control.drivers import FAILED, RECENT_LIVE_S, DriverRow
from pipelines.errors import PipelinesError, by_name, last_error_line, raised_inside
from pipelines.runtime import logs, requests
from pipelines.runtime.lifetime import (
    Terminated,
    check_master,
    master_problem,
    pid_alive,
    process_start,
    same_process,
    tied_command,
)
from pipelines.runtime.session import spark_confs, spark_env
from pipelines.storage.home import Home
from pipelines.storage.hostlocal import host_dir

DRIVER = str(Path(__file__).with_name("driver.py"))
INTERRUPT_GRACE_S = 60.0  # a Ctrl-C'd driver gets this long to stop at a batch boundary
START_WAIT_S = 120.0
"""How long ``start`` waits for a detached driver to register: a JVM and a session take 5 to 60 s on a loaded
2-core machine. One still starting then is left to start (its pid file and log say where it is), not killed:
a slow start is not a failure, and the CLI that waits for it is not what keeps it."""
LOG_TAIL_BYTES = 65536
"""How much of a dead driver's log is searched for its error: the end of a JVM's stack trace and what follows."""


def default_master() -> str:
    """``PIPELINES_SPARK_MASTER``, else ``local[*]``: where drivers launched by operations run. A value Spark would
    refuse is refused here, naming the variable: an operator who never typed ``--master`` would not look there."""
    master = os.environ.get("PIPELINES_SPARK_MASTER") or "local[*]"
    problem = master_problem(master)
    if problem is not None:
        raise PipelinesError(f"$PIPELINES_SPARK_MASTER: {problem}")
    return master


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
    """``<host> <pid>`` of a driver this host started detached: host-local bookkeeping (``storage.hostlocal``).

    Under a local home it lives in the home, which hosts may share (NFS):
    hence the host in it.
    """
    return host_dir(home.root, "run") / f"{job}.pid"


def driver_log(home: Home, job: str) -> Path:
    """Where a detached driver started on this host writes its log."""
    return host_dir(home.root, "run") / f"{job}.log"


def run(
    home: Home, job: str, *, available_now: bool, master: str, detach: bool, max_seconds: float | None = None
) -> int:
    """Run the job's driver; in the foreground returns its exit code, detached returns its pid at once.

    Detached, nothing waits for the driver to start: benchmarks and tests wait for the heartbeat they need.
    ``start`` is the detached run that waits (``pipelines run --detach``); ``spawn`` and ``settle`` are its two
    halves, for a caller that starts several drivers and waits for them together (the keepalive).
    """
    cmd = _checked_command(home, job, available_now=available_now, master=master, max_seconds=max_seconds)
    if not detach:
        return _foreground(home, job, cmd, master)
    return _spawn(home, job, cmd, master)[0].pid


class Started(StrEnum):
    """Where a detached driver stood when ``start`` returned."""

    RUNNING = "running"  # registered in the drivers table: its Spark application is up
    STARTING = "starting"  # neither registered nor exited within START_WAIT_S; it goes on starting
    ENDED = "ended"  # exited with 0 before a look saw it registered (an available-now run shorter than a poll)


@dataclass(frozen=True)
class Detached:
    """A detached driver ``start`` launched: its pid on this host, where it stood, and its log."""

    pid: int
    state: Started
    log: Path


def start(
    home: Home,
    job: str,
    *,
    available_now: bool,
    master: str,
    max_seconds: float | None = None,
    wait_s: float = START_WAIT_S,
) -> Detached:
    """Run the job's driver detached, and return once it has registered in the ``drivers`` table.

    The registration is what the driver writes when its Spark session is up,
    before its first query (``driver.run_job``): what ``stop``, the keepalive
    and the status views take for a driver, so "running" here means what it
    means there. A driver that exits first is a ``PipelinesError`` naming its
    exit code and why (the failure it recorded, else its log's error line),
    and its pid file is removed: nothing is left that names a dead driver.
    A driver that has done neither after ``wait_s`` is ``STARTING``.
    """
    spawned = spawn(home, job, available_now=available_now, master=master, max_seconds=max_seconds)
    return settle(home, spawned, until=time.monotonic() + wait_s)


@dataclass(frozen=True)
class Spawned:
    """A detached driver just started: its process, where its part of the log begins, the drivers it is not."""

    job: str
    proc: subprocess.Popen[bytes]
    log_offset: int
    earlier: frozenset[str]  # driver ids the job's table held before it: its registration is a new one


def spawn(home: Home, job: str, *, available_now: bool, master: str, max_seconds: float | None = None) -> Spawned:
    """Start the job's driver detached, after the refusals that need no JVM; ``settle`` waits for its start."""
    cmd = _checked_command(home, job, available_now=available_now, master=master, max_seconds=max_seconds)
    earlier = frozenset(d.driver_id for d in ControlPlane(home).drivers.latest(job, recent_s=RECENT_LIVE_S))
    proc, offset = _spawn(home, job, cmd, master)
    return Spawned(job, proc, offset, earlier)


def settle(home: Home, spawned: Spawned, *, until: float) -> Detached:
    """Wait until the spawned driver registered (``RUNNING``), exited, or ``until`` (a ``time.monotonic`` moment)
    passed (``STARTING``). One that exited with an error raises it (see ``start``)."""
    job, proc = spawned.job, spawned.proc
    drivers = ControlPlane(home).drivers
    log = driver_log(home, job)
    poll = 0.5 if home.is_local else 2.0  # on object storage each look is requests
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, min(poll, until - time.monotonic())))  # returns as soon as it exits
        if proc.returncode is not None:
            _forget(home, job, proc.pid)
            if proc.returncode == 0:
                return Detached(proc.pid, Started.ENDED, log)
            raise _exited(home, job, proc.returncode, _log_since(log, spawned.log_offset), log)
        recent = drivers.latest(job, recent_s=RECENT_LIVE_S)
        new = [d for d in recent if d.driver_id not in spawned.earlier and d.on_this_host]
        if new and new[0].state != FAILED:  # a failed one is on its way out: its exit code and failure follow
            return Detached(proc.pid, Started.RUNNING, log)
        if time.monotonic() >= until:
            return Detached(proc.pid, Started.STARTING, log)


def _checked_command(home: Home, job: str, *, available_now: bool, master: str, max_seconds: float | None) -> list[str]:
    """The driver's command, after the refusals that need no JVM: an unknown job, a bad master, a live twin."""
    ControlPlane(home).job_models.active(job)  # an unknown job fails here, with the known jobs listed
    check_master(master)  # a dead master is one line now, not a minute of JVM retries
    live = running_pid(home, job)
    if live is not None:
        raise PipelinesError(
            f"job {job!r} already has a live driver in this home (pid {live}); stop it first "
            f"(python -m pipelines stop {job}) or let it run"
        )
    elsewhere = [d for d in ControlPlane(home).drivers.live(job) if not d.on_this_host]
    if elsewhere:
        d = elsewhere[0]
        raise PipelinesError(
            f"job {job!r} already has a live driver in this home, pid {d.pid} on host {d.host}; stop it first "
            f"(python -m pipelines stop {job}) or let it run"
        )
    requests.clear_stop(home, job)
    requests.clear_failure(home, job)
    return driver_command(home, job, available_now=available_now, master=master, max_seconds=max_seconds)


def _spawn(home: Home, job: str, cmd: list[str], master: str) -> tuple[subprocess.Popen[bytes], int]:
    """The driver started in its own session, its output appended to its log; and where this run's part begins."""
    driver_log(home, job).parent.mkdir(parents=True, exist_ok=True)
    with open(driver_log(home, job), "ab") as log:  # the child has its own descriptor
        offset = log.tell()
        proc = subprocess.Popen(
            cmd, env=spark_env(master), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    started = process_start(proc.pid)  # a reused pid is then never taken for this driver (``_pid``)
    since = "" if started is None else f" {started:.3f}"
    pid_file(home, job).write_text(f"{socket.gethostname()} {proc.pid}{since}\n")
    return proc, offset


def _forget(home: Home, job: str, pid: int) -> None:
    """Remove the pid file of a driver that exited, unless another run has written its own since."""
    if _pid(home, job) == pid:
        pid_file(home, job).unlink(missing_ok=True)


def _log_since(log: Path, offset: int) -> str:
    """The end of what this run wrote to the log, which earlier runs' lines precede."""
    try:
        with log.open("rb") as f:
            f.seek(max(offset, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _exited(home: Home, job: str, code: int, text: str, log: Path) -> PipelinesError:
    """Why a detached driver exited while starting: its recorded failure, the platform's error its log carries, or
    its log's last error line; as the class it was, so ``--json`` names the same error a foreground run would."""
    said = failure(home, job) or raised_inside(text)
    why = str(said) if said is not None else last_error_line(text)
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"  # the OOM killer's -9
    message = f"job {job} driver {how} while starting" + (f": {why}" if why else "")
    return (type(said) if said is not None else PipelinesError)(f"{message} (its log: {log})")


def _foreground(home: Home, job: str, cmd: list[str], master: str) -> int:
    """Run the driver tied to this process; Ctrl-C stops it at a batch boundary, then re-raises.

    The driver runs in its own session, so a Ctrl-C to the terminal's process
    group reaches only this process, which turns it into the same stop request
    ``pipelines stop`` makes: the query stops between micro-batches and nothing
    is cut half way. A second Ctrl-C, or a driver that does not stop within
    ``INTERRUPT_GRACE_S``, ends it the hard way (what a crash would, which the
    sink and the checkpoints survive). SIGTERM, which the CLI raises as
    ``Terminated``, is taken the same way: a supervisor's stop (systemd,
    Kubernetes, Airflow's task kill) asks for a graceful end and sends SIGKILL
    after its own grace. If this process is killed, the driver is killed with it
    (``lifetime.tied_command``).
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
    except (KeyboardInterrupt, Terminated) as stopping:  # Ctrl-C, or SIGTERM (a supervisor's graceful stop)
        requests.ask_stop(home, job)
        how, again = ("interrupted", "Ctrl-C") if isinstance(stopping, KeyboardInterrupt) else ("terminated", "SIGTERM")
        sys.stderr.write(f"{how}: stopping job {job} at its next batch boundary ({again} again to kill it at once)\n")
        sys.stderr.flush()
        try:
            proc.wait(timeout=INTERRUPT_GRACE_S)
        except (KeyboardInterrupt, Terminated, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            requests.clear_stop(home, job)
        raise
    except BaseException:  # anything else ends this process: the driver goes first, as it would with us
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # before the caller's clean-ups (a rescale's event, its lock) run
        proc.wait()
        raise


class StopOutcome(StrEnum):
    """What ``stop`` found: an operator told "stopped" when nothing ran believes they stopped something."""

    NONE_RUNNING = "none running"
    STOPPED = "stopped"
    REQUESTED = "requested"  # a driver still runs: not waited for, or not stopped within the time


def stop(home: Home, job: str, *, wait: bool = True, timeout: float = 120.0) -> StopOutcome:
    """Ask the job's driver, on whichever host it runs, to stop at its next batch boundary, and say what happened.

    Waited for are the driver this host started detached (until its process
    is gone) and every driver the ``drivers`` table shows live, on any host
    (until its registration says it stopped or failed, or it goes silent);
    none of another host's pids is looked up.

    The request is withdrawn once no driver is left to read it: a request
    outliving its driver (none ran, or it died first) would stop the next
    driver of the job after its first batch, which a driver submitted without
    ``run`` (Airflow's ``SubmitDriver``) never clears. The price: a driver that
    is still starting (not yet registered, no pid file here) misses the stop,
    and ``stop`` has to be asked again once it runs.
    """
    control = ControlPlane(home)
    control.job_models.active(job)
    requests.ask_stop(home, job)
    pid = _pid(home, job)
    if pid is not None and not _alive(pid):
        pid_file(home, job).unlink(missing_ok=True)
        pid = None
    drivers = {d.driver_id for d in control.drivers.live(job) if not _gone_here(d)}
    if pid is None and not drivers:
        requests.clear_stop(home, job)
        return StopOutcome.NONE_RUNNING
    if not wait:
        return StopOutcome.REQUESTED
    poll = 0.2 if home.is_local else 1.0  # on object storage each look is requests
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pid is not None and not _alive(pid):
            pid_file(home, job).unlink(missing_ok=True)
            pid = None
        if drivers:
            drivers &= {d.driver_id for d in control.drivers.live(job) if not _gone_here(d)}
        if pid is None and not drivers:
            requests.clear_stop(home, job)  # a driver that stopped cleared it; one that died first did not
            return StopOutcome.STOPPED
        time.sleep(poll)
    return StopOutcome.REQUESTED


def running_pid(home: Home, job: str) -> int | None:
    """The pid of this home's detached driver of ``job`` that this host started, if it is still alive."""
    pid = _pid(home, job)
    return pid if pid is not None and _alive(pid) else None


def kill(home: Home, job: str) -> None:
    """The hard way (tests and emergencies): SIGKILL the process group of the driver this host started.

    A stop request the driver never got to read goes with it (see ``stop``).
    """
    pid = _pid(home, job)
    if pid is not None and _alive(pid):
        with contextlib.suppress(ProcessLookupError):  # it ended between the look and the kill
            os.killpg(pid, signal.SIGKILL)
        requests.clear_stop(home, job)


def _pid(home: Home, job: str) -> int | None:
    """The pid in the job's pid file if this host wrote it; None for none, another host's, or a host-less one.

    The file keeps the driver's start time beside its pid (``<host> <pid> <start>``): a live process of that pid
    that started at another time took the pid after the driver died, so the file names nothing any more and goes
    (it is never reported alive, and never signalled). A file of two fields, from before, is judged by its pid.
    """
    path = pid_file(home, job)
    try:
        host, pid, *since = path.read_text().split()
        if host != socket.gethostname() or len(since) > 1:
            return None
        number, started = int(pid), [float(s) for s in since]
    except (FileNotFoundError, ValueError):
        return None
    if started and pid_alive(number) and not same_process(number, started[0]):
        path.unlink(missing_ok=True)
        return None
    return number


def _gone_here(driver: DriverRow) -> bool:
    """A driver of this host whose process is gone (killed: it wrote no end); another host's is never judged."""
    return driver.on_this_host and not _alive(driver.pid)


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    return pid_alive(pid)


def failure(home: Home, job: str) -> PipelinesError | None:
    """The platform error the job's last driver failed with (``requests.read_failure``), as its own class, or None."""
    note = requests.read_failure(home, job)
    if note is None:
        return None
    return by_name(str(note.get("error")), str(note.get("message")))
