"""One place that knows how to start Spark on these machines and on a cluster.

Python data sources are pickled *by reference*, so every Python process Spark
starts (executors and the driver-side source/sink runners) must be able to
import ``pipelines``. ``--py-files`` does not reach the streaming source runner
in Spark 4.2, so the package root goes on ``PYTHONPATH`` for the driver's
children and into ``spark.executorEnv.PYTHONPATH`` for executors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def spark_env() -> dict[str, str]:
    """Environment for a Spark driver (in-process or spark-submit) that runs our Python code."""
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PACKAGE_ROOT not in paths:
        paths.insert(0, PACKAGE_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def spark_confs(master: str) -> dict[str, str]:
    """Confs every session of ours uses; small shuffles, loopback binding in local mode."""
    confs = {
        "spark.master": master,
        "spark.executorEnv.PYTHONPATH": spark_env()["PYTHONPATH"],
        "spark.executorEnv.PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.streaming.stopTimeout": "30s",
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
    for key, value in spark_env().items():
        if key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "PYTHONPATH"):
            os.environ[key] = value
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in {**spark_confs(master), **{k: str(v) for k, v in extra.items()}}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register_sources(spark)
    return spark


def register_sources(spark: Any) -> None:
    from pipelines.runtime.sink import ElasticDeltaSink
    from pipelines.runtime.source import ElasticSource

    spark.dataSource.register(ElasticSource)
    spark.dataSource.register(ElasticDeltaSink)
