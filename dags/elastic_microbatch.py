"""Run the jobs: available-now jobs through spark-submit on a schedule, continuous jobs kept alive.

A job whose `trigger` is `available-now` is run by the Spark provider's spark-submit (connection
`spark_default` names the master: host `local[*]`, `spark://host:7077`, ...), on the worker that runs the
task, with that worker's driver address (`pipelines_airflow.submit`): it processes what its inputs hold and
exits. A `continuous` job's heartbeat is read from the metrics table; a driver whose heartbeat is stale is
launched again, detached, on the worker that runs the check, unless `PIPELINES_KEEPALIVE=report` says that
something else keeps the drivers running (a compose service's restart policy, a Kubernetes Deployment).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import task
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.platform_dag import platform_dag
from pipelines_airflow.run_conf import check_conf
from pipelines_airflow.submit import SubmitDriver

from pipelines.operations import keepalive


@platform_dag(
    "elastic_microbatch",
    "runtime",
    description="Runs each available-now job over what arrived, and relaunches a continuous job whose driver is down",
    doc_md=__doc__,
    schedule=timedelta(minutes=10),
)
def elastic_microbatch() -> None:
    @task
    def batch_jobs() -> list[list[str]]:
        """spark-submit arguments of every available-now job's driver."""
        check_conf()
        home = PipelinesHook().home()
        return [
            ["--home", str(home.root), "--job", job, "--available-now"]
            for job in keepalive.jobs_by_trigger(home)["available-now"]
        ]

    @task
    def keep_continuous_jobs_running() -> dict[str, Any]:
        """Heartbeat of every continuous job; a driver whose heartbeat is stale is launched again (detached)."""
        check_conf()
        return keepalive.keep_running(PipelinesHook().home(), launch=keepalive.launches())

    SubmitDriver.partial(task_id="run_available_now", conn_id="spark_default", name="pipelines-microbatch").expand(
        application_args=batch_jobs()
    )
    keep_continuous_jobs_running()


elastic_microbatch()
