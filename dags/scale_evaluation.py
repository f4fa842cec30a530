"""Autosize: every five minutes, ask each job's policy for a factor and trigger `elastic_rescale` when it acts.

The policy (`pipelines.core.autosize`, default or the job's own `autosize.policy`) reads the metrics table:
input rate, lag and its trend, per-task busy time; it scales up when lag grows and tasks are busy, down when
they idle, within bounds, after a cooldown, with hysteresis against flapping. Every decision and its reasons
are recorded in the `autosize_decisions` table, holds included.

Each rescale it triggers is named after its decision (`autosize__<job>__<decided at>`), so the Elastic pipelines
page shows what became of it. The rescale carries the model version it was decided on: if another scaling step
(a partition expansion) changed the model before the rescale had the job's lock, the autosizer is asked again,
and the run is skipped with its answer as the note unless it still acts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import task
from pipelines_airflow import autosize_runs
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.platform_dag import platform_dag
from pipelines_airflow.run_conf import check_conf

from pipelines.control import ControlPlane


@platform_dag(
    "scale_evaluation",
    "scaling",
    description="The autosizer's decision for each job from its lag and throughput; triggers elastic_rescale",
    doc_md=__doc__,
    schedule=timedelta(minutes=5),
)
def scale_evaluation() -> None:
    @task
    def evaluate_jobs() -> list[dict[str, Any]]:
        """One decision per job; a job being scaled right now gets a recorded skip naming the lock's holder."""
        check_conf()
        from pipelines.core.autosize import DOWN, UP
        from pipelines.operations.autosize import evaluate

        home = PipelinesHook().home()
        control = ControlPlane(home)
        triggers = []
        for job in control.job_models.jobs():
            version = control.job_models.active_version(job)
            decided_at = control.clock.now()
            decision = evaluate(home, job, decided_at=decided_at)
            print(f"{job}: {decision.action} -> factor {decision.factor}: " + "; ".join(decision.reasons))
            if decision.action in (UP, DOWN):
                conf = {
                    "job": job,
                    "factor": decision.factor,
                    "reason": decision.reason_for(f"autosize {decision.action}"),
                    "dry_run": False,
                    "decided_on": version,
                    "autosized": True,
                }
                triggers.append({"conf": conf, "trigger_run_id": autosize_runs.run_id(job, decided_at)})
        return triggers

    TriggerDagRunOperator.partial(
        task_id="trigger_rescale",
        trigger_dag_id="elastic_rescale",
        wait_for_completion=False,
        skip_when_already_exists=True,  # a retried trigger finds its decision's run made: one rescale per decision
    ).expand_kwargs(evaluate_jobs())


scale_evaluation()
