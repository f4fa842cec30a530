"""Autosize: every five minutes, ask each job's policy for a factor and trigger `elastic_rescale` when it acts.

The policy (`pipelines.core.autosize`, default or the job's own `autosize.policy`) reads the metrics table:
input rate, lag and its trend, per-task busy time; it scales up when lag grows and tasks are busy, down when
they idle, within bounds, after a cooldown, with hysteresis against flapping. Every decision and its reasons
are recorded in the `autosize_decisions` table, holds included.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.run_conf import check_conf

from pipelines.control import ControlPlane


@dag(
    dag_id="scale_evaluation",
    description="The autosizer's decision for each job from its lag and throughput; triggers elastic_rescale",
    schedule=timedelta(minutes=5),
    catchup=False,
    max_active_runs=1,
    tags=["elastic-pipelines", "scaling"],
    doc_md=__doc__,
)
def scale_evaluation() -> None:
    @task
    def evaluate_jobs() -> list[dict[str, Any]]:
        """One decision per job; a job being scaled right now gets a recorded skip naming the lock's holder."""
        check_conf()
        from pipelines.core.autosize import DOWN, UP
        from pipelines.operations.autosize import evaluate

        home = PipelinesHook().home()
        confs = []
        for job in ControlPlane(home).job_models.jobs():
            decision = evaluate(home, job)
            print(f"{job}: {decision.action} -> factor {decision.factor}: " + "; ".join(decision.reasons))
            if decision.action in (UP, DOWN):
                reason = f"autosize {decision.action}: " + "; ".join(decision.reasons)
                confs.append({"job": job, "factor": decision.factor, "reason": reason[:500], "dry_run": False})
        return confs

    TriggerDagRunOperator.partial(
        task_id="trigger_rescale", trigger_dag_id="elastic_rescale", wait_for_completion=False
    ).expand(conf=evaluate_jobs())


scale_evaluation()
