"""Run the jobs: available-now jobs through spark-submit on a schedule, continuous jobs kept alive.

A job whose `trigger` is `available-now` is run by the Spark provider's SparkSubmitOperator (connection
`spark_default` names the master: host `local[*]`, `spark://host:7077`, ...): it processes what its inputs
hold and exits. A `continuous` job runs detached; this DAG reads its heartbeat in the metrics table and
launches its driver again when the heartbeat is stale.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import dag, task
from pipelines_airflow.hooks import PipelinesHook

from pipelines.operations import keepalive
from pipelines.runtime.launcher import DRIVER
from pipelines.runtime.session import spark_env, submit_confs


@dag(
    dag_id="elastic_microbatch",
    schedule=timedelta(minutes=10),
    catchup=False,
    max_active_runs=1,
    tags=["elastic-pipelines", "runtime"],
    doc_md=__doc__,
)
def elastic_microbatch() -> None:
    @task
    def batch_jobs() -> list[list[str]]:
        """spark-submit arguments of every available-now job's driver."""
        home = PipelinesHook().home()
        return [
            ["--home", str(home.root), "--job", job, "--available-now"]
            for job in keepalive.jobs_by_trigger(home)["available-now"]
        ]

    @task
    def keep_continuous_jobs_running() -> dict[str, Any]:
        """Heartbeat of every continuous job; a driver whose heartbeat is stale is launched again (detached)."""
        return keepalive.keep_running(PipelinesHook().home())

    SparkSubmitOperator.partial(
        task_id="run_available_now",
        application=DRIVER,
        conn_id="spark_default",
        name="pipelines-microbatch",
        env_vars={
            k: v
            for k, v in spark_env().items()
            if k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "SPARK_LOCAL_IP")
        },
        conf=submit_confs(),
    ).expand(application_args=batch_jobs())
    keep_continuous_jobs_running()


elastic_microbatch()
