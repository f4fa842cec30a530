"""Rescale a job from the Airflow UI: change its elasticity factor while it runs, verified afterwards.

validate → plan (a dry run stops here and shows the plan) → scale: take the job's lock → stop at a batch
boundary → migrate checkpoints → activate the new model → restart → wait until caught up → data-quality
checks over the scaling window → record the event (downtime, records replayed, verdict) and release the lock.
The steps are `pipelines.operations.scaling`; `python -m pipelines rescale` runs the same ones.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, dag, task
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.scaling import scaling_path

from pipelines.core.groupers import GROUPERS
from pipelines.operations import scaling


@dag(
    dag_id="elastic_rescale",
    schedule=None,
    catchup=False,
    max_active_runs=1,  # one rescale at a time from this DAG; the control-plane lock covers the other DAGs
    tags=["elastic-pipelines", "scaling"],
    params={
        "job": Param("enrichment", type="string", minLength=1, description="the job to rescale"),
        "factor": Param(
            2,
            type=["integer", "string"],
            description='target elasticity factor (a whole number >= 1), or "auto" to ask the autosizer',
        ),
        "reason": Param("manual rescale", type="string", minLength=1, description="recorded with the new model"),
        "dry_run": Param(False, type="boolean", description="plan and show the new model, change nothing"),
        "grouper": Param(None, type=["null", "string"], enum=[None, *sorted(GROUPERS)], description="keep if empty"),
        "lock_wait_s": Param(0, type="integer", minimum=0, description="wait this long for another scaling step"),
        "catch_up_timeout_s": Param(600, type="integer", minimum=1),
        "restart_timeout_s": Param(300, type="integer", minimum=1),
        "sequence_column": Param(None, type=["null", "string"], description="per-key sequence in the sink"),
        "spark_master": Param(None, type=["null", "string"], description="master of a catch-up run"),
    },
    doc_md=__doc__,
)
def elastic_rescale() -> None:
    @task
    def validate(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The request, with "auto" resolved by the autosizer; a bad factor, reason or an unknown job fails here."""
        assert params is not None
        factor = params["factor"]
        reason = params["reason"]
        if isinstance(factor, str) and factor.strip().lower() == "auto":
            from pipelines.operations.autosize import evaluate

            decision = evaluate(PipelinesHook().home(), params["job"])
            print(f"autosizer: {decision.action} to factor {decision.factor}: " + "; ".join(decision.reasons))
            factor, reason = decision.factor, f"{reason} (auto: {'; '.join(decision.reasons)})"
        elif isinstance(factor, str):
            factor = factor.strip()
        request = scaling.ScalingRequest(params["job"], factor, reason, grouper=params.get("grouper") or None)
        scaling.validate(PipelinesHook().home(), request)  # the factor, the job; the plan task checks the rest
        return request.to_dict()

    @task
    def plan(request: dict[str, Any]) -> dict[str, Any]:
        summary = scaling.plan(PipelinesHook().home(), scaling.ScalingRequest.from_dict(request))
        for key, value in summary.items():
            print(f"{key:>14}: {value}")
        return summary

    @task.short_circuit
    def proceed(summary: dict[str, Any], params: dict[str, Any] | None = None) -> bool:
        assert params is not None
        if params["dry_run"]:
            print("dry run: the plan above was not applied")
            return False
        if not summary["changes"]:
            print(f"job {summary['job']} already runs this model (factor {summary['from_factor']}): nothing to do")
            scaling.settle_abandoned(PipelinesHook().home(), summary["job"])  # a killed operation's lock and event
            return False
        return True

    request = validate()
    proceed(plan(request)) >> scaling_path(request)


elastic_rescale()
