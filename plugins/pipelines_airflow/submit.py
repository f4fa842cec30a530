"""spark-submit of a job's driver from an Airflow task, set up on the worker that submits it.

The driver runs where the task runs (spark-submit's client mode), so its
environment (the Python it runs, the package's path, the address it binds and
advertises to the executors) and its Spark confs belong to *that* worker, not to
the host that parsed the DAG file: a DAG file's values are computed by the
dag-processor and travel to every worker unchanged, which pinned each driver to
the parser's loopback address (``SPARK_LOCAL_IP=127.0.0.1``) even on a cluster
master, where the executors on other hosts could then never reach it. Here
everything is computed in ``execute``, from the master the task's Spark
connection names.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Context

DRIVER_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")
"""What a driver takes from ``spark_env``; the rest of its environment is the worker's own."""


def driver_env(master: str) -> dict[str, str]:
    """The environment of a driver for ``master`` started on this host."""
    from pipelines.runtime.session import spark_env

    env = spark_env(master)  # loopback for a local master; for a cluster's, this host's address towards it
    return {key: env[key] for key in DRIVER_ENV if key in env}


def driver_confs(master: str) -> dict[str, str]:
    """The confs ``pipelines run`` gives a driver for ``master`` (loopback for a local one), minus the master."""
    from pipelines.runtime.session import spark_confs

    return {k: v for k, v in spark_confs(master).items() if k != "spark.master"}


def connection_master(conn_id: str) -> str:
    """The master the Spark provider's hook makes of the connection (``local[*]``, ``spark://host:7077``, ...)."""
    return str(SparkSubmitHook(conn_id=conn_id)._connection["master"])  # the hook's own reading of its connection


class SubmitDriver(SparkSubmitOperator):
    """A job's driver (``pipelines/runtime/driver.py``) through the Spark provider's spark-submit, set up here.

    ``application_args`` are the driver's (``--home``, ``--job``, ``--available-now``). The application, the
    environment and the confs are filled in at execute time on this worker; ``env_vars`` and ``conf`` given to
    the operator win over them.
    """

    def execute(self, context: Context) -> Any:
        from pipelines.runtime.launcher import DRIVER

        master = connection_master(self._conn_id)
        self.application = self.application or DRIVER
        self.env_vars = {**driver_env(master), **(self.env_vars or {})}
        self.conf = {**driver_confs(master), **(self.conf or {})}
        self.log.info("driver for %s: environment %s", master, {k: self.env_vars[k] for k in sorted(self.env_vars)})
        return super().execute(context)
