"""Fault injection: named points in the code where a test can crash the process on purpose.

The platform's promise (no record lost, duplicated or reordered whatever
dies when) is only as good as the crashes it has survived, so the places
where a crash hurts most carry a named point, and the fault matrix
(``tests/faults/``, ``scripts/faults.sh``) crashes each of them and checks
the recovery. ``PIPELINES_FAULT`` selects one point:

* ``POINT`` raises :class:`InjectedFault` at its first pass: an in-process
  failure (the operation's own error handling and teardown still run);
* ``kill:POINT`` or ``kill:POINT@N`` sends SIGKILL, at the N-th pass (default
  1), to the whole process group of the session the process runs in: a
  ``kill -9`` of the driver application or of the operation, JVM and Python
  workers included, with no chance to clean up. Passes are counted across
  the processes of the session (Spark runs the sink and the source in Python
  workers), in a counter file named after the session, in
  ``PIPELINES_FAULT_DIR`` (default: the temporary directory). Whoever reads
  the counters gives each target a directory of its own, so two crashes run
  side by side never read or remove each other's counts.

A kill targets the session leader's group, so whoever sets ``kill:`` starts
the target in a session of its own (``start_new_session=True``); the fault
matrix always does.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

FAULT_ENV = "PIPELINES_FAULT"
FAULT_DIR_ENV = "PIPELINES_FAULT_DIR"

POINTS: dict[str, str] = {
    "mid_batch": "a task of a micro-batch has read its records and is writing them (nothing committed yet)",
    "after_sink_commit": "a micro-batch's sink commit landed, its state changes and checkpoints not yet",
    "mid_state_write": "a task wrote its state changes, nothing of its batch committed yet",
    "after_state_commit": "a micro-batch's sink and state commits landed, its checkpoints not yet appended",
    "mid_state_compaction": "a state's compaction wrote its new current files, not yet committed",
    "mid_migration": "model N+1 is saved, its migrated start checkpoints not yet written",
    "after_migrate": "model N+1 and its start checkpoints are saved, N+1 not yet active",
    "during_switch": "N+1 is active, the operation is getting it running (in-place switch or catch-up run)",
    "store_switch": "an adjunct store committed a new version that no micro-batch has committed yet",
}


class InjectedFault(RuntimeError):
    """Raised where ``PIPELINES_FAULT`` asks for an in-process failure, to prove recovery."""


def crash_point(point: str) -> None:
    """Crash here if ``PIPELINES_FAULT`` names this point; otherwise (always, in production) nothing."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    kill, name, nth = parse(spec)
    if name != point:
        return
    if not kill:
        raise InjectedFault(f"{FAULT_ENV}={spec}: crashing at {point} ({POINTS[point]})")
    if _pass_count(point) == nth:
        os.killpg(os.getsid(0), signal.SIGKILL)


def parse(spec: str) -> tuple[bool, str, int]:
    """``[kill:]POINT[@N]`` as (kill, point, N); an unknown point is an error, so a typo cannot pass silently."""
    kill = spec.startswith("kill:")
    body = spec.removeprefix("kill:")
    name, _, nth = body.partition("@")
    if name not in POINTS:
        raise ValueError(f"{FAULT_ENV}={spec!r}: unknown point {name!r}; points are {sorted(POINTS)}")
    try:
        n = int(nth) if nth else 1
    except ValueError:
        raise ValueError(f"{FAULT_ENV}={spec!r}: the pass after '@' must be a whole number") from None
    if n < 1 or (nth and not kill):
        raise ValueError(f"{FAULT_ENV}={spec!r}: '@N' (N >= 1) is only for kill:POINT@N")
    return kill, name, n


def counter_file(point: str, session: int | None = None) -> Path:
    """Where the passes of ``point`` in one session are counted (one byte per pass)."""
    sid = os.getsid(0) if session is None else session
    return Path(os.environ.get(FAULT_DIR_ENV) or tempfile.gettempdir()) / f"pipelines-fault-{sid}-{point}"


def _pass_count(point: str) -> int:
    """This pass's number in the session, from where this process's own O_APPEND write landed.

    An append moves the end of the file atomically and leaves this
    descriptor's offset just after its own byte, so concurrent workers each
    get a different number (the file's size could be read after a sibling's
    write and skip a number).
    """
    fd = os.open(counter_file(point), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, b".")
        return os.lseek(fd, 0, os.SEEK_CUR)
    finally:
        os.close(fd)
