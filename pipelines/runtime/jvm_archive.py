"""A class-data archive of our Spark driver's classes, built once at set-up and mapped by every driver JVM.

A Spark driver JVM loads and verifies some 15,000 classes before its first
query (Spark, Scala, Hadoop, Delta, our jars), every time: each job start, each
catch-up run of a rescale, each Airflow task that submits a run, each test
driver. Java's application class-data sharing (CDS, JEP 350) keeps the parsed
classes in a file the JVM maps instead: measured here, a trivial
``spark-submit`` took 4.2-4.4 CPU-s with the archive against 7.4-8.5 without
(``benchmarks/README.md``). ``scripts/setup.sh`` (and the Dockerfile) run a
representative driver once with ``-XX:ArchiveClassesAtExit`` (``build``); from
then on ``java_options`` gives every driver ``-XX:SharedArchiveFile``.

An archive is only good for the JVM and the class path it was made with: the
JVM checks both and silently goes without sharing on a mismatch. So the
archive sits beside a stamp of what it was made with (``stamp``), and it is
offered only while the stamp still holds; the JVM's own warning on a mismatch
is silenced, since going without is correct, just slower. See
docs/decisions/0015-class-data-sharing.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pipelines.runtime.classpath import ARCHIVE, ARCHIVE_ENV, PACKAGE_ROOT, QUIET, STAMP, java_options, stamp
from pipelines.runtime.lifetime import pid_alive

__all__ = ["ARCHIVE", "STAMP", "build", "java_options", "stamp"]


def build(progress: bool = True) -> bool:
    """Run a representative driver (a job on the embedded log, Delta read by Spark) and keep its classes.

    True when an archive was written. A failure leaves no archive (drivers then start without one).
    """
    from pipelines.runtime.session import spark_env

    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    for path in (ARCHIVE, STAMP, *_abandoned()):
        path.unlink(missing_ok=True)
    current = stamp()
    fresh = ARCHIVE.with_name(f".{ARCHIVE.name}.{os.getpid()}")
    env = spark_env()
    env[ARCHIVE_ENV] = f"-XX:ArchiveClassesAtExit={fresh} {QUIET}"
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [sys.executable, "-m", "pipelines.cli.archive_workload", str(PACKAGE_ROOT)],
            env=env,
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if done.returncode != 0 or not fresh.is_file():
        fresh.unlink(missing_ok=True)
        if progress:
            tail = "\n".join((done.stderr or "").splitlines()[-15:])
            print(f"[setup] no class archive for Spark drivers (they start without one):\n{tail}", file=sys.stderr)
        return False
    os.replace(fresh, ARCHIVE)
    STAMP.write_text(json.dumps(current, indent=1, sort_keys=True))
    return True


def _abandoned() -> list[Path]:
    """Archives a build left half-written: a JVM stopped by Ctrl-C still dumps its classes at exit (80-180 MB)."""
    found = []
    for path in ARCHIVE.parent.glob(f".{ARCHIVE.name}.*"):
        pid = path.name.rpartition(".")[2]
        if not pid.isdigit() or not pid_alive(int(pid)):
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.runtime.jvm_archive [--if-stale]``: build the archive (``--if-stale``: only when
    missing or made for another JVM or other jars)."""
    args = sys.argv[1:] if argv is None else argv
    if "--if-stale" in args and java_options():
        return 0
    return 0 if build() else 1


if __name__ == "__main__":
    sys.exit(main())
