"""``python -m pipelines``: operate streams, job models and the control plane from a shell.

Every user mistake is a ``PipelinesError`` and ends as one ``error: ...`` line
on stderr with exit code 2 (argparse's own usage errors use 2 as well), so
scripts and Airflow's BashOperator can tell "fix your input" from a crash,
which keeps its traceback. ``--json`` prints machine-readable output on
stdout; progress and notes always go to stderr so stdout stays parseable.
Ctrl-C ends a command with exit code 130 and SIGTERM with 143, both after
the command's own clean-ups (``_sigterm_raises``).

The commands are declared once in ``table``; ``parser`` builds argparse from it;
each command group's handlers live in their own module, imported only when
one of its commands runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import TextIO

from pipelines.cli.output import Output
from pipelines.cli.parser import CliParser, build_parser, handler, writes
from pipelines.cli.table import EMBEDDED_SYSTEM
from pipelines.core.limits import not_utf8
from pipelines.errors import PipelinesError, one_line
from pipelines.runtime.lifetime import Terminated
from pipelines.storage.home import Home, check_writable, resolve_home

__all__ = ["EMBEDDED_SYSTEM", "Output", "build_parser", "main"]


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        for word in words:  # a name, path or query in another encoding fails deep in pyarrow, delta-rs or py4j
            if (escaped := not_utf8(word)) is not None:
                parser.error(f"argument '{escaped}' is not UTF-8 text: names, paths and queries must be")
        args = parser.parse_args(words)
    except SystemExit as e:  # argparse's refusal: its one line is on stderr; --json wants it on stdout too
        if e.code == 2 and "--json" in words and CliParser.last_error is not None:
            json.dump({"error": "usage", "message": CliParser.last_error}, out)
            out.write("\n")
        raise
    output = Output(args.json, out, err)
    home: Home | None = None
    try:
        with _sigterm_raises():
            home = resolve_home(args.home)
            if writes(args):
                check_writable(home)
            with _libraries_log(home, args.verbose):  # Spark's and Airflow's own lines: the home's log file
                handler(args.entry)(args, home, output)
    except PipelinesError as e:
        return _fail(output, e.code, str(e))
    except BrokenPipeError:  # `pipelines ... | head`: the reader is gone, nothing to report (before OSError: it is one)
        if out is sys.stdout:  # keep Python from complaining again when it flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # the home or a file cannot be read or written: the user's to fix, not a bug
        where = f" ({e.filename})" if e.filename else _remote(home)
        return _fail(output, "io", f"{e.strerror or one_line(str(e))}{where}")
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
    except Terminated:  # the shell's code for a process SIGTERM ended: 128 + 15
        err.write("terminated\n")
        return 128 + signal.SIGTERM
    except Exception as e:  # boto3's refusals (wrong keys, no bucket, no endpoint) are the user's to fix too
        from pipelines.storage.objects import refused, unanswered

        message = refused(e)
        if message is not None:
            return _fail(output, "storage", f"{message}{_remote(home)}")
        if unanswered(e):  # a 5xx or throttling after boto3's retries: the store's outage, not a bug of ours
            message = f"the store failed the request: {one_line(str(e))}"
            return _fail(output, "store_unavailable", f"{message}{_remote(home)}")
        raise
    return 0


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` where the command stands, as Ctrl-C raises ``KeyboardInterrupt``.

    Its default action ends the process on the spot, so no ``finally`` ran: a ``stream produce`` stopped by a CI
    limit, ``timeout`` or a stopped service left its half-written temporary file in the home, and a rescale its
    lock for a lease. Now the same clean-ups run as for Ctrl-C. Set only where SIGTERM still has its default action
    and on the main thread (the only one that may set handlers): a program that calls ``main`` keeps its own. A
    second SIGTERM ends the process at once, as before.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _remote(home: Home | None) -> str:
    """`` (home s3://...)`` for an object-store home: an error from its store names which store it was."""
    return f" (home {home.root})" if home is not None and not home.is_local else ""


def _libraries_log(home: Home, verbose: bool) -> contextlib.AbstractContextManager[object]:
    """Unless --verbose, the libraries' log lines go to ``<home>/logs/pipelines.log`` (``runtime.logs``)."""
    if verbose:
        return contextlib.nullcontext()
    from pipelines.runtime.logs import quiet

    return quiet(home)


def _fail(output: Output, code: str, message: str) -> int:
    """``error: ...`` on stderr and exit 2; with ``--json`` also ``{"error": code, "message": ...}`` on stdout."""
    output.err.write(f"error: {message}\n")
    if output.as_json:
        json.dump({"error": code, "message": message}, output.out)
        output.out.write("\n")
    return 2
