"""Where a driver's JVM finds its classes: our jars beside pyspark's, a ``SPARK_HOME`` of links, and the drivers'
class-data archive, if set-up built one for this JVM and these jars.

One module for the class path (``session`` builds sessions with it, ``jvm_archive`` builds the archive for it), so
the archive's identity and the class path it holds for are defined together. See
docs/decisions/0015-class-data-sharing.md and docs/decisions/0011-installed-pyspark.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipelines.errors import PipelinesError

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
SPARK_JARS = Path(PACKAGE_ROOT) / ".jvm" / "spark-jars"
"""Where ``scripts/setup.sh`` (and the Dockerfile) copies the jars ``jvm/spark/pom.xml`` pins."""


@functools.cache
def spark_home() -> str | None:
    """A ``SPARK_HOME`` for the pip-installed pyspark without its zipped Python copy; None to leave Spark be.

    Links only, built once per installation beside its jars (``.jvm/``), or in the temporary folder where that
    folder is missing or read-only. Not in the temporary folder first: the drivers' class-data archive
    (``runtime.jvm_archive``) holds for the class path it was made with, this folder's path included, so a
    ``TMPDIR`` other than set-up's (each test run has its own) silently started every driver without it; and a
    removed clone left its links behind in /tmp. Made in a sibling folder then renamed, so drivers starting
    together never see half of one.
    """
    if os.environ.get("SPARK_HOME"):
        return None
    import pyspark

    real = Path(pyspark.__file__).resolve().parent
    if not (real / "jars").is_dir() or not (real / "bin").is_dir() or not (real / "python" / "lib").is_dir():
        return None  # not the pip layout: nothing to leave out
    tag = hashlib.sha256(str(real).encode()).hexdigest()[:12]
    places = [SPARK_JARS.parent / f"spark-home-{pyspark.__version__}-{tag}"] if SPARK_JARS.parent.is_dir() else []
    places.append(Path(tempfile.gettempdir()) / f"pipelines-spark-home-{os.getuid()}-{pyspark.__version__}-{tag}")
    problem: OSError | None = None
    for home in places:
        if (home / "jars").is_dir():
            return str(home)
        try:
            _link_spark_home(real, home)
        except OSError as e:  # a read-only folder: the next place, or slower Python starts, nothing worse
            problem = e
            continue
        if (home / "jars").is_dir():
            return str(home)
    print(f"[pipelines] using Spark's zipped pyspark ({problem})", file=sys.stderr)
    return None


def _link_spark_home(real: Path, home: Path) -> None:
    """``home``: a link to each entry of pyspark's folder ``real`` but its ``python`` (the zipped copy)."""
    building = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
    for entry in real.iterdir():
        if entry.name != "python":
            (building / entry.name).symlink_to(entry)
    try:
        building.rename(home)
    except OSError:  # another driver made it first
        for link in building.iterdir():
            link.unlink()
        building.rmdir()


class MissingJarsError(PipelinesError):
    """The JVM libraries every Spark session needs were never fetched (``scripts/setup.sh`` fetches them)."""


def spark_classpath(jars: Path = SPARK_JARS) -> str:
    """The class path entry for our jars: ``<folder>/*``, which the JVM expands to every jar in it.

    On the class path rather than in ``spark.jars``: the JVM loads them from
    the install at start, as it loads pyspark's own jars, so no application
    copies 36 MB to each executor or serves them from the driver, and Hadoop's
    filesystems and Delta's classes come from the one system class loader (a
    ``spark.jars`` jar lives in a child loader some Hadoop code does not
    search). The price: every host of a cluster needs them at the same path,
    which holds for the image every process of a deployment runs
    (``Dockerfile``) and for a local master.
    """
    if not any(jars.glob("*.jar")):
        raise MissingJarsError(
            f"Spark's JVM libraries (Delta Lake, s3a, Spark's Kafka source) are missing from {jars}: "
            "run scripts/setup.sh, which fetches them with Maven (jvm/spark/pom.xml)"
        )
    return str(jars / "*")


ARCHIVE = Path(PACKAGE_ROOT) / ".jvm" / "spark-driver.jsa"
STAMP = ARCHIVE.with_suffix(".json")
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A mismatched archive is a fallback, not an error: no warning on every start."""


def stamp() -> dict[str, str]:
    """What an archive depends on: the JVM, pyspark's jars and ours (names, sizes, times), and where they are."""
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


ARCHIVE_ENV = "PIPELINES_JVM_ARCHIVE_OPTIONS"
"""Set only while ``build`` runs its workload: the options that make that driver write the archive instead."""
