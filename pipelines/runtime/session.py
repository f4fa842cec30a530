"""One place that knows how to start Spark on these machines and on a cluster.

Python data sources are pickled *by reference*, so every Python process Spark
starts (executors and the driver-side source/sink runners) must be able to
import ``pipelines``. ``--py-files`` does not reach the streaming source runner
in Spark 4.2, so the package root goes on ``PYTHONPATH`` for the driver's
children and into ``spark.executorEnv.PYTHONPATH`` for executors.

Spark also puts its own ``python/lib/pyspark.zip`` first on every Python
process's path. Python compiles modules imported from a zip on every start
(it cannot cache them), which costs each new Python process Spark starts (the
source runner of every query, so every rescale's downtime; the worker
daemon) about 0.4 s idle and over 1 s under load, against 0.25 s from the
installed, compiled package of the same version. So when pyspark is
pip-installed and the user set no ``SPARK_HOME``, the driver runs with a
``SPARK_HOME`` made of links to that installation minus its ``python/``
folder (``spark_home``): Spark's Python processes then import the installed
pyspark and py4j. A ``SPARK_HOME`` the user sets is used as it is.

Every session also runs with the JVM libraries ``jvm/spark/pom.xml`` pins
(Delta Lake, s3a, Spark's Kafka source), copied by ``scripts/setup.sh`` into
``.jvm/spark-jars`` (``spark_classpath``), with Delta's SQL extension and
catalog registered, and with s3a configured from the standard AWS variables
when they are set (``s3a_confs``).
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import tempfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from pipelines.runtime.classpath import (
    ARCHIVE_ENV,
    PACKAGE_ROOT,
    SPARK_JARS,
    MissingJarsError,
    java_options,
    spark_classpath,
    spark_home,
)

__all__ = ["PACKAGE_ROOT", "SPARK_JARS", "MissingJarsError", "build_session", "spark_classpath", "spark_home"]

LOOPBACK = "127.0.0.1"


def driver_address(master: str) -> str | None:
    """The address a driver for ``master`` binds and advertises to its executors; None leaves it to Spark.

    Loopback for ``local[*]``: nothing listens beyond this machine. A cluster's
    executors run on other hosts and connect back to the driver, so there it
    must be an address they reach: loopback made every remote executor fail
    with "Connection refused: localhost/127.0.0.1" while the job waited for
    resources for ever. That is ``SPARK_LOCAL_IP`` when set, else the source
    address of this host's route to the master (a UDP socket "connected" to
    it, which sends nothing); a master on this machine's loopback gets
    loopback that way. Spark's own ``spark.driver.host`` and
    ``spark.driver.bindAddress`` still override what this gives.
    """
    if master.startswith("local"):
        return LOOPBACK
    if os.environ.get("SPARK_LOCAL_IP"):
        return os.environ["SPARK_LOCAL_IP"]
    endpoint = _master_endpoint(master)
    if endpoint is None:  # yarn: Spark finds the host's address itself
        return None
    try:
        found = socket.getaddrinfo(*endpoint, type=socket.SOCK_DGRAM)
        family, kind, proto, _, target = min(found, key=lambda info: info[0] != socket.AF_INET)  # IPv4 first
        with socket.socket(family, kind, proto) as probe:
            probe.connect(target)
            return str(probe.getsockname()[0])
    except OSError:  # no route to the master (yet): Spark's own choice, and the master's error if it is gone
        return None


def _master_endpoint(master: str) -> tuple[str, int] | None:
    """Host and port of the first master in ``spark://h:p[,h2:p2]`` or ``k8s://https://h:p``."""
    if master.startswith("spark://"):
        url, default_port = urlparse("spark://" + master.removeprefix("spark://").split(",")[0]), 7077
    elif master.startswith("k8s://"):
        url, default_port = urlparse(master.removeprefix("k8s://")), 443
    else:
        return None
    try:
        return (url.hostname, url.port or default_port) if url.hostname else None
    except ValueError:  # a bad port: the launcher's master check names it
        return None


def spark_env(master: str | None = None) -> dict[str, str]:
    """Environment for a Spark driver (in-process or spark-submit) that runs our Python code.

    With ``master``, ``SPARK_LOCAL_IP`` (what the driver binds) and
    ``SPARK_LOCAL_HOSTNAME`` (what it advertises) default to
    :func:`driver_address`; without, to loopback, as for ``local[*]``.
    """
    env = dict(os.environ)
    home = spark_home()
    if home is not None:
        env["SPARK_HOME"] = home
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    address = LOOPBACK if master is None else driver_address(master)
    if address is not None:
        env.setdefault("SPARK_LOCAL_IP", address)
        if address != LOOPBACK:  # advertised as the address itself, not its reverse-DNS name, which may not resolve
            env.setdefault("SPARK_LOCAL_HOSTNAME", address)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PACKAGE_ROOT not in paths:
        paths.insert(0, PACKAGE_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
"""C1 only, no C2: the JVM plans micro-batches and ships each virtual task's descriptor, records never enter
it (``runtime.reading``), so C2's optimised code never pays for its compiling. C2 compiled for 0.6-1.4 CPU-s
in every cheap-job query of 5 s on 2 cores (a fresh JVM per Airflow run never warms up); without it a
``pipelines run --available-now`` of a cheap job took 13.7 s and 11.4 CPU-s instead of 14.8 s and 16.5
(``benchmarks/README.md``). Set as Spark's *default* Java options, which a
user's ``spark.driver.extraJavaOptions`` follow, so ``-XX:TieredStopAtLevel=4`` there brings C2 back."""


SHUFFLE_PARTITIONS = "4"

IDLE_POLL = "100ms"
"""How long a query that found no new record waits before asking its source again (Spark's default: 10 ms).
With ``trigger_interval: "0 seconds"`` an idle job asked its source a hundred times a second, each time a Python
call that reads the inputs' ends: 5.5 CPU-s per 30 s idle, against 1.3 with 100 ms. The price is at most 100 ms
before the first record after an idle spell is read; a job with a trigger interval waits that interval anyway."""

DELTA_CONFS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "1",
}
"""Delta's SQL (``DESCRIBE HISTORY``, ``delta.`path` `` tables) in every session. Delta rebuilds a table's state
with a shuffle into 50 partitions by default, sized for logs of millions of files; the home's tables have
hundreds, and reading one with 50 took 12.0 s against 1.2 s with 1 (``python -m benchmarks.bench_jvm``, a table
of 20 commits). A session that reads a huge table sets it higher."""


def s3a_confs(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Hadoop's s3a filesystem set from the standard AWS variables, so a checkpoint can be an ``s3a://`` URI.

    The same reading of the variables as every other client of the home
    (``storage.s3config``): ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``)
    names an S3-compatible store (then path-style requests, which such stores
    serve without a DNS name per bucket), ``AWS_REGION`` its region, and an
    ``http://`` endpoint needs ``AWS_ALLOW_HTTP=true`` as it does for delta-rs.
    The keys never become confs: the AWS SDK's default chain reads them from
    the environment, which ``spark_env`` passes on. No variable set: no confs.
    """
    from pipelines.storage.s3config import S3Settings

    return S3Settings.from_environment(dict(env)).hadoop_confs()


def driver_java_options() -> str:
    """``JVM_OPTIONS``, Python's temporary folder and, where set-up built one for this JVM and these jars, the
    class-data archive (``runtime.jvm_archive``): a driver then maps the classes it would otherwise load and
    verify one by one.

    The JVM ignores ``TMPDIR``: without ``java.io.tmpdir`` a driver's scratch (``spark-*``, ``blockmgr-*``,
    ``artifacts-*``, the extracted native libraries) went to /tmp even where the user had pointed every other
    tool elsewhere, and stayed there whenever the driver was killed. ``spark.local.dir`` and
    ``SPARK_LOCAL_DIRS`` still win for Spark's own scratch.
    """
    extra = os.environ.get(ARCHIVE_ENV) or java_options()
    tmp = shlex.quote(f"-Djava.io.tmpdir={tempfile.gettempdir()}")
    return f"{JVM_OPTIONS} {tmp} {extra}".strip()


def spark_confs(master: str) -> dict[str, str]:
    """Confs every session of ours uses; our jars and Delta, small shuffles, loopback in local mode, C1-only JIT.

    A cluster master gets no driver address here: ``spark_env(master)`` sets it, so a ``spark.driver.host`` or
    ``spark.driver.bindAddress`` the user gives Spark (``spark-defaults.conf`` included) wins over it.
    """
    classpath = spark_classpath()
    confs = {
        "spark.master": master,
        "spark.driver.extraClassPath": classpath,
        "spark.executor.extraClassPath": classpath,
        **DELTA_CONFS,
        **s3a_confs(),
        "spark.driver.defaultJavaOptions": driver_java_options(),
        "spark.executor.defaultJavaOptions": JVM_OPTIONS,
        "spark.executorEnv.PYTHONPATH": spark_env()["PYTHONPATH"],
        "spark.executorEnv.PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.sql.streaming.pollingDelay": IDLE_POLL,
    }
    if master.startswith("local") or "127.0.0.1" in master or "localhost" in master:
        confs["spark.driver.bindAddress"] = "127.0.0.1"
        confs["spark.driver.host"] = "127.0.0.1"
    return confs


def submit_confs() -> dict[str, str]:
    """The confs of ``spark_confs`` that hold on any master, for a submitter that sets the master itself."""
    return {k: v for k, v in spark_confs("unknown").items() if k != "spark.master"}


def build_session(master: str = "local[2]", app_name: str = "elastic-pipelines", **extra: Any) -> Any:
    """A SparkSession with our data sources registered."""
    passed = (
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "SPARK_LOCAL_IP",
        "SPARK_LOCAL_HOSTNAME",
        "PYTHONPATH",
        "SPARK_HOME",
    )
    for key, value in spark_env(master).items():
        if key in passed:
            os.environ[key] = value
    from pyspark.sql import SparkSession

    from pipelines.runtime.logs import jvm_stderr

    builder = SparkSession.builder.appName(app_name)
    for key, value in {**spark_confs(master), **{k: str(v) for k, v in extra.items()}}.items():
        builder = builder.config(key, value)
    with jvm_stderr():  # the JVM's log on the home's log file unless --verbose (runtime.logs)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register_sources(spark)
    return spark


def register_sources(spark: Any) -> None:
    from pipelines.runtime.sink import ElasticDeltaSink
    from pipelines.runtime.source import ElasticSource

    spark.dataSource.register(ElasticSource)
    spark.dataSource.register(ElasticDeltaSink)
