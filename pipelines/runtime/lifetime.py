"""Child processes that die with the process that started them, and a Spark master checked before a start.

Why. ``pipelines rescale`` runs its catch-up as a ``spark-submit`` child; a
killed CLI (``kill -9``, a closed terminal, an Airflow worker lost) used to
leave that child running, finishing the catch-up and committing batches on
its own while the next operator's rescale was already planning on the job.
On Linux the kernel can end a child when its parent ends
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``, kept across ``exec``), and nothing else
is needed: no watchdog process, nothing that a ``kill -9`` could skip.

How it is set. Not with ``subprocess``'s ``preexec_fn``: the CLI has threads
by then (delta-rs's runtime, pyarrow's pools), and Python code run between
``fork`` and ``exec`` in a threaded process may deadlock. Instead the child is
started through ``tied_command``: a Python interpreter (``-I -S``: no site, no
environment, about 10 ms) that sets the signal on itself, checks its parent
did not die before that, and ``exec``\\ s the real command, which keeps it.
``spark-submit`` ``exec``\\ s ``spark-class``, which ``exec``\\ s the JVM, so the JVM is
the tied process; the Python driver the JVM starts ties itself to the JVM
(``die_with_parent`` in ``driver.main``), so the chain goes down together.
``run --detach`` is started untied, in its own session: it outlives its CLI on
purpose, and its driver still dies with its JVM.

The signal is sent when the *thread* that started the child ends: children
are started from the thread that waits for them (the CLI's main thread, the
JVM's thread that waits for the Python driver).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import sys
from urllib.parse import urlparse

import psutil

from pipelines.core.limits import shown
from pipelines.errors import PipelinesError


class Terminated(BaseException):
    """SIGTERM arrived while a CLI command ran (``cli._sigterm_raises``); a ``BaseException``, as
    ``KeyboardInterrupt`` is, so no ``except Exception`` takes it for a failure to report. A foreground driver
    takes it as it takes Ctrl-C: stopped at its next batch boundary (``launcher._foreground``)."""


PR_SET_PDEATHSIG = 1
MASTER_CONNECT_TIMEOUT_S = 5.0
LOCAL_MASTER = re.compile(r"local(\[(?P<threads>[0-9]+|\*)(\s*,\s*[0-9]+)?\])?")
LOCAL_CLUSTER_MASTER = re.compile(r"local-cluster\[\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*]")
_JAVA_INT_MAX = 2**31 - 1
MASTER_FORMS = "local, local[N], local[*], local[N,F], spark://HOST:PORT, k8s://HOST:PORT, yarn or local-cluster[N,C,M]"
"""The masters Spark starts with (``SparkSubmit`` and ``SparkContext``'s master patterns, Spark 4)."""

_TIE = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[2]), 0, 0, 0)\n"  # PR_SET_PDEATHSIG
    "os.getppid() == int(sys.argv[1]) or os._exit(137)\n"  # the parent died before the call: follow it now
    "os.execvp(sys.argv[3], sys.argv[3:])\n"  # a bare name (node, java) is looked up on PATH
)


def process_start(pid: int) -> float | None:
    """When the process with this pid started (seconds since the epoch), or None when there is none.

    A pid file keeps it beside the pid: pids are reused, and a pid alone once named whatever process took it after
    the driver died, whose process group a kill then ended.
    """
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:  # none (or a zombie's, or another user's, which is not ours to read)
        return None


def same_process(pid: int, started: float) -> bool:
    """Whether the process with this pid is the one that started at ``started`` (to the millisecond kept)."""
    now = process_start(pid)
    return now is not None and abs(now - started) < 0.01


def pid_alive(pid: int) -> bool:
    """Whether a process of this host has that pid (another user's counts): signal 0 asks without sending."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tied_command(cmd: list[str], death_signal: signal.Signals = signal.SIGKILL) -> list[str]:
    """``cmd`` started so that it gets ``death_signal`` when this process (this thread) ends; as it is off Linux.

    SIGKILL for a process whose children die with it; SIGTERM for one that must end its own children (an
    Airflow scheduler's executor workers outlive a scheduler killed outright).
    """
    if not sys.platform.startswith("linux"):
        return cmd
    return [sys.executable, "-I", "-S", "-c", _TIE, str(os.getpid()), str(int(death_signal)), *cmd]


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent ends (Linux; elsewhere nothing happens)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the process then lives as before
    if os.getppid() != parent:  # the parent ended before the call
        os._exit(137)


def master_problem(master: str) -> str | None:
    """Why Spark would refuse this master URL, or None: said before a JVM starts, not by the JVM's stack trace
    after ten seconds (``bogus://x`` reached the user as "the driver exited with code 1", and a rescale had by
    then planned and activated its new model)."""
    if master == "yarn":
        return None
    local = LOCAL_MASTER.fullmatch(master)
    if local or LOCAL_CLUSTER_MASTER.fullmatch(master):
        digits = [n.lstrip("0") or "0" for n in re.findall(r"[0-9]+", master)]
        too_big = [n for n in digits if len(n) > 10 or int(n) > _JAVA_INT_MAX]
        if too_big:  # Spark reads each with toInt: a NumberFormatException after the driver started
            return f"Spark master {shown(master)} holds a number above {_JAVA_INT_MAX:,}, the most Spark reads there"
    if LOCAL_CLUSTER_MASTER.fullmatch(master):
        return None
    if local:
        if local["threads"] is not None and local["threads"] != "*" and int(local["threads"]) < 1:
            return f"Spark master {master!r} asks for no thread: use local[N] with N >= 1, or local[*]"
        return None
    for scheme in ("spark://", "k8s://"):
        if master.startswith(scheme):
            return None if master.removeprefix(scheme).strip() else f"Spark master {master!r} names no host"
    return f"Spark master {master!r} is not one Spark starts with: use {MASTER_FORMS}"


def check_master(master: str, timeout_s: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """Refuse a master Spark would refuse, or a ``spark://`` master none of whose hosts answers, before a JVM is
    started for it.

    Without this, spark-submit retries a dead master for a minute and prints
    every retry's stack trace (176 lines). Whether a ``yarn`` or ``k8s://``
    cluster answers is left to Spark.
    """
    problem = master_problem(master)
    if problem is not None:
        raise PipelinesError(f"{problem}; nothing was started")
    if not master.startswith("spark://"):
        return
    failures = []
    for address in master.removeprefix("spark://").split(","):
        parsed = urlparse(f"spark://{address}")
        invalid = f"Spark master {master} is not a valid spark://HOST:PORT[,HOST:PORT] URL"
        try:
            host, port = parsed.hostname, parsed.port or 7077
        except ValueError as e:
            raise PipelinesError(f"{invalid}: {e}") from None
        if not host:
            raise PipelinesError(invalid)
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as e:
            reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e)).lower()
            failures.append(f"{host}:{port} {reason}")
    raise PipelinesError(
        f"Spark master {master} is not reachable ({'; '.join(failures)}); nothing was started. Start the master, or "
        "give another one (--master, or $PIPELINES_SPARK_MASTER for operations), e.g. local[*] on this machine"
    )
