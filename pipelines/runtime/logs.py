"""Where Spark's and Airflow's own log lines go when a person runs the CLI: a file in the home, not the terminal.

A fresh ``scripts/demo.sh`` printed 76 of Spark's lines between its progress
lines (55 of them ``WARN ProcessingTimeExecutor: Current batch is falling
behind``, one per trigger), and ``pipelines run`` printed Spark's INFO log.
Those are the libraries' diagnostics, for whoever digs into a problem; an
operator watching a run wants the platform's own lines. So, unless
``--verbose`` is given, ``quiet(home)`` sends them to ``<home>/logs/pipelines.log`` (this host's folder for
an object-store home, ``storage.hostlocal``)
and says so once, when the first Spark starts:

* an in-process Spark (the demo): the JVM is started with its standard error on
  that file (``jvm_stderr``), so its log4j console output, its start-up
  warnings and its Python workers' errors all land there;
* a ``spark-submit`` driver (``pipelines run``, a rescale's catch-up run):
  its standard error (the JVM's log) goes to the file, its standard output
  (the Python driver's own lines, which Spark's PythonRunner forwards there)
  stays on the terminal;
* Python's ``logging`` and ``warnings`` (Airflow's, GX's, py4j's) write to the file too.

Airflow tasks never call ``quiet``: their task log is where everything belongs.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pipelines.storage.home import Home
from pipelines.storage.hostlocal import host_dir

_target: Path | None = None
_announced = False
_holding = False
_pending = False


def log_path(home: Home) -> Path:
    """``<home>/logs/pipelines.log``; under an object-store home, this host's folder for it (a log is appended to,
    which an object cannot be, and it is this host's processes' diagnostics)."""
    return host_dir(home.root, "logs") / "pipelines.log"


HELD_RECORDS = 1000
"""The most records kept back while a local home does not exist yet (the last ones are kept)."""


class _HomeLog(logging.FileHandler):
    """A file handler that makes its folder and opens its file at the first record: a command that logs
    nothing leaves nothing behind (a read-only home stays untouched).

    While a local home does not exist, its records are held back instead: a refused or read-only command on a
    mistyped --home (a Kafka client logging its failed connections) must not make that home by writing a log in
    it. They are written when the handler closes if the command made the home meanwhile (a ``stream create``),
    dropped otherwise: that command's one ``error:`` line says what went wrong.
    """

    def __init__(self, path: Path, home: Path | None) -> None:
        super().__init__(path, encoding="utf-8", delay=True)
        self._home = home
        self._held: collections.deque[logging.LogRecord] = collections.deque(maxlen=HELD_RECORDS)

    def _open(self) -> io.TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def _home_missing(self) -> bool:
        return self.stream is None and self._home is not None and not self._home.is_dir()

    def emit(self, record: logging.LogRecord) -> None:
        if self._home_missing():
            self._held.append(record)
            return
        while self._held:  # the home appeared: what was held first, in order
            super().emit(self._held.popleft())
        super().emit(record)

    def close(self) -> None:
        with self.lock or contextlib.nullcontext():
            if self._held and not self._home_missing():
                while self._held:
                    super().emit(self._held.popleft())
            self._held.clear()
            super().close()


@contextlib.contextmanager
def quiet(home: Home) -> Iterator[Path]:
    """While it lasts, the libraries' log lines go to the home's log file; its path. Restored on exit."""
    global _target, _announced
    before = (_target, _announced)
    _target, _announced = log_path(home), False
    handler = _HomeLog(_target, home.root.local_path() if home.is_local else None)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    consoles = [
        h
        for h in root.handlers
        if type(h) is logging.StreamHandler and getattr(h, "stream", None) in (sys.stderr, sys.stdout)
    ]
    level = root.level
    for console in consoles:
        root.removeHandler(console)
    root.addHandler(handler)
    if level == logging.NOTSET or level > logging.INFO:
        root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield _target
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        for console in consoles:
            root.addHandler(console)
        _target, _announced = before


def target() -> Path | None:
    """The log file the libraries write to, or None when they write to the terminal (``--verbose``, a task)."""
    return _target


def announce() -> None:
    """Say once where the libraries' lines are, when the first of them is about to be written there (inside
    ``until_done``: when its block succeeds)."""
    global _announced, _pending
    if _target is not None and not _announced:
        _announced = True
        if _holding:
            _pending = True
            return
        sys.stderr.write(f"Spark's and Airflow's own log lines go to {_target} (--verbose shows them here)\n")
        sys.stderr.flush()


@contextlib.contextmanager
def until_done() -> Iterator[None]:
    """While it lasts, ``announce`` waits: its line is printed when the block ends without an error, and not at
    all when it raises.

    For a command whose whole answer comes at its end (``sql``): bad input there is one ``error:`` line and exit
    2, and the note printed as Spark started made every failed query two lines. A failure's own line says what
    is wrong; the note is for a command that got on with its work. Long runs (``run``, the demo) announce at
    once instead: their own progress lines follow, and the log is where to look while they go.
    """
    global _holding, _pending, _announced
    outer = (_holding, _pending)
    _holding, _pending = True, False
    done = False
    try:
        yield
        done = True
    finally:
        pending = _pending
        _holding, _pending = outer
        if pending:
            _announced = False  # unsaid: said now on success (or held by an outer block), else by a later Spark
            if done:
                announce()


@contextlib.contextmanager
def jvm_stderr() -> Iterator[None]:
    """While a JVM is started in this process's children, their standard error is the log file (when quiet)."""
    if _target is None:
        yield
        return
    announce()
    sys.stderr.flush()
    saved = os.dup(2)
    _target.parent.mkdir(parents=True, exist_ok=True)
    with _target.open("ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def submit_stderr() -> IO[bytes] | None:
    """Where a ``spark-submit`` child's standard error goes: the log file (opened for it), or None to inherit."""
    if _target is None:
        return None
    announce()
    _target.parent.mkdir(parents=True, exist_ok=True)
    return _target.open("ab")
