"""Spark for integration tests: one local session per test run and a fresh home per test.

* ``spark`` — one ``local[2]`` SparkSession for the whole pytest run, built by
  :func:`pipelines.runtime.session.build_session` and warmed up once, because
  on these 2-core machines a session costs 6-13 s and its first Python task
  another ~4 s (measured while these fixtures were written).
* ``home`` — a fresh :class:`~pipelines.storage.home.Home` under ``tmp_path``.

Spark on a standalone cluster is the cluster tests' (``tests/cluster``: a master and two worker hosts, the driver
on a host of its own, the home on an object store), not a loopback master's here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.runtime.session import build_session
from pipelines.storage.home import Home

__all__ = ["TEST_JVM_OPTIONS", "fast_jvm_confs", "home", "spark"]

# C1-only JIT (every session's default since session.JVM_OPTIONS; repeated here so a test driver keeps it even
# where a default is overridden) and the serial GC: on these shared 2-core machines the C2 compiler and parallel
# GC threads compete with the tests for CPU. Measured here under load: session start 16.9/12.8 s -> 11.7/9.5 s,
# first mapInArrow 9.3/7.6 s -> 5.8/5.7 s, a small repeated job ~1.0 s -> ~0.55 s. The serial GC is tests only.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def fast_jvm_confs() -> dict[str, str]:
    """Confs a test driver adds to ``spark_confs()``: the fast-start JVM options for driver and executors."""
    return {"spark.driver.extraJavaOptions": TEST_JVM_OPTIONS, "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS}


# --- local session -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> Iterator[Any]:
    """One ``local[2]`` SparkSession for the whole test run, with our data sources registered and warm workers.

    Started after the session's S3 store (``s3_server``), whose address its environment carries, so a test
    can run a job on an ``s3://`` home in this session as on a local one.

    Do not stop it in a test; streaming tests should stop their own queries.
    """
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    confs = {"spark.sql.warehouse.dir": str(warehouse), "spark.local.dir": str(warehouse / "local"), **fast_jvm_confs()}
    session = build_session("local[2]", "pipelines-tests", **confs)
    _warm_up(session)
    try:
        yield session
    finally:
        for query in session.streams.active:  # a test that forgot its query must not hang the stop
            with contextlib.suppress(Exception):
                query.stop()
        session.stop()
        # py4j closes its last connections from __del__ at interpreter exit, logging each at INFO through a handler
        # whose stream pytest has closed by then: "--- Logging error ---" and a traceback after the summary line.
        # The session is stopped; nothing py4j says from here on is news.
        for name in ("py4j", "py4j.clientserver", "py4j.java_gateway"):  # each logger's own flag: not inherited
            logging.getLogger(name).disabled = True


def _warm_up(session: Any) -> None:
    """Start the Python daemon and one worker per core, with pyarrow and ``pipelines`` imported in each."""

    def identity(batches: Iterator[Any]) -> Iterator[Any]:  # nested: pickled by value, tests/ need not be importable
        import pipelines.core.hashing  # noqa: F401  (what our process functions import first)

        yield from batches

    session.range(0, 4, 1, 4).mapInArrow(identity, "id LONG").collect()


# --- per-test home -------------------------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Home:
    """A fresh, empty deployment home (nothing is created until something writes)."""
    return Home(tmp_path / "home")
