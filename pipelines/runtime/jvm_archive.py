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

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipelines.runtime.lifetime import pid_alive

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = PACKAGE_ROOT / ".jvm" / "spark-driver.jsa"
STAMP = ARCHIVE.with_suffix(".json")
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A mismatched archive is a fallback, not an error: no warning on every start."""


def stamp() -> dict[str, str]:
    """What an archive depends on: the JVM, pyspark's jars and ours (names, sizes, times), and where they are."""
    from pipelines.runtime.session import SPARK_JARS, spark_home

    java = shutil.which("java") or ""
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr if java else ""
    home = spark_home() or os.environ.get("SPARK_HOME", "")
    jars = sorted(Path(home, "jars").glob("*.jar")) + sorted(SPARK_JARS.glob("*.jar"))
    listing = "\n".join(f"{p.name} {p.stat().st_size} {int(p.stat().st_mtime)}" for p in jars if p.exists())
    return {
        "java": hashlib.sha256(f"{os.path.realpath(java)}\n{version}".encode()).hexdigest()[:16],
        "jars": hashlib.sha256(listing.encode()).hexdigest()[:16],
        "spark_home": str(home),
        "spark_jars": str(SPARK_JARS),
    }


def java_options() -> str:
    """The JVM options that map the archive, or nothing when there is none or it was made for other jars/JVM."""
    try:
        recorded = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return ""
    if not ARCHIVE.is_file() or recorded != _current_stamp():
        return ""
    return f"-XX:SharedArchiveFile={ARCHIVE} {QUIET}"


_STAMP: dict[str, str] | None = None


def _current_stamp() -> dict[str, str]:
    global _STAMP
    if _STAMP is None:
        _STAMP = stamp()
    return _STAMP


WORKLOAD = r"""
import sys
from pathlib import Path
from pipelines.control.home import Home
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.runtime.driver import run_job
from pipelines.runtime.session import build_session
from pipelines.systems.deltalog import DeltaLog

home = Home(Path.cwd() / "home")  # build's scratch folder, removed after
log = DeltaLog(home.streams)
log.create("events", 2)
log.produce("events", [(f"k{i % 7}".encode(), b'{"key": "k", "seq": 0}', None) for i in range(40)])
base = JobConfig.load(Path(sys.argv[1]) / "include" / "jobs" / "enrichment.yaml").to_dict()
base.update(name="archive", inputs=[{"system": "deltalog", "stream": "events"}], elasticity_factor=2,
            process_options={"latency_ms": 0}, sink={"table": "archive_out"}, dead_letter={"table": "archive_dead"},
            batch={"max_records": 20, "trigger_interval": "0 seconds"})
base.pop("stores", None)
create_job(home, JobConfig.from_dict(base))
spark = build_session("local[2]", "pipelines-class-archive")
run_job(spark, home, "archive", available_now=True, progress=lambda m: None)
spark.sql("SELECT 1").collect()
spark.read.format("delta").load(str(home.sinks / "archive_out")).count()
spark.stop()
"""


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
            [sys.executable, "-c", WORKLOAD, str(PACKAGE_ROOT)],
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


ARCHIVE_ENV = "PIPELINES_JVM_ARCHIVE_OPTIONS"
"""Set only while ``build`` runs its workload: the options that make that driver write the archive instead."""


def main(argv: list[str] | None = None) -> int:
    """``python -m pipelines.runtime.jvm_archive [--if-stale]``: build the archive (``--if-stale``: only when
    missing or made for another JVM or other jars)."""
    args = sys.argv[1:] if argv is None else argv
    if "--if-stale" in args and java_options():
        return 0
    return 0 if build() else 1


if __name__ == "__main__":
    sys.exit(main())
