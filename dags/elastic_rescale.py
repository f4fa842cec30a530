"""Rescale a job from the Airflow UI: change its elasticity factor while it runs, verified afterwards.

validate → plan (a dry run stops here and shows the plan) → scale: take the job's lock → stop at a batch
boundary → migrate checkpoints → activate the new model → restart → wait until caught up → data-quality
checks over the scaling window → record the event (downtime, records replayed, verdict) and release the lock.
The steps are `pipelines.operations.scaling`; `python -m pipelines rescale` runs the same ones.

Trigger with `{"job": "enrichment", "factor": 4}`, or `{"job": "enrichment", "auto": true}` to let the autosizer
choose. The "Elastic pipelines" page (Browse menu) previews the plan of a factor and triggers this DAG with it.

The factor is taken as typed, then checked by `validate`: a whole number from 1 to `PIPELINES_MAX_FACTOR` (default
1024), as a number or as text. Airflow 3.3's trigger form turns an integer Param into a number field that clamps on
blur (0 became 1, 1025 became 1024: a real rescale nobody asked for) and empties what it cannot parse; a Param it
must refuse comes back as a "Bad Request" toast. So the Param has no type for the form to enforce (a text field that
keeps what was typed), and a factor `validate` refuses fails the run with the reason as the run's note
(`pipelines_airflow.notes`), shown on the run's page and the grid. Nothing is changed by a refused run.

The reason is stored with the new model and shown on one line wherever its history is, so it is printable text of at
most 500 characters with no newline, tab, NUL or other control character (`pipelines.core.limits.check_reason`, the
CLI's and the page's rule too). The Param's `maxLength` refuses a longer one at trigger time, `validate` the rest.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from airflow.sdk import Param, task
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.notes import noted_failure, refuse, skip
from pipelines_airflow.platform_dag import platform_dag
from pipelines_airflow.run_conf import check_conf
from pipelines_airflow.scaling import LOCK_WAIT_S, scaling_path, seconds_param

from pipelines.control import ControlPlane
from pipelines.core.groupers import GROUPERS
from pipelines.core.hashing import MAX_FACTOR_ENV, max_factor, validate_factor
from pipelines.core.limits import MAX_REASON, check_reason
from pipelines.errors import ConfigError, PipelinesError
from pipelines.operations import scaling
from pipelines.runtime.lifetime import master_problem


@platform_dag(
    "elastic_rescale",
    "scaling",
    description="Rescales a job to a factor (or the autosizer's): stop at a batch boundary, migrate, switch, verify",
    doc_md=__doc__,
    schedule=None,
    params={
        "job": Param("enrichment", type="string", minLength=1, description="the job to rescale"),
        # No "type": Airflow's form then renders a text field from the default's type (a string) and keeps what was
        # typed; REST clients may send a number. The validate task checks it and refuses with the reason as the note.
        "factor": Param(
            "2",
            anyOf=[{"type": "integer"}, {"type": "number"}, {"type": "string"}, {"type": "null"}],
            description=(
                f"target elasticity factor: key buckets per input partition, a whole number from 1 to {max_factor()} "
                f"({MAX_FACTOR_ENV}); anything else fails the run's validate task with the reason as the run's note; "
                "ignored when auto is on"
            ),
        ),
        "auto": Param(
            False,
            type="boolean",
            description="let the autosizer choose the factor from the job's metrics (its reasons are recorded)",
        ),
        # maxLength: Airflow's form and REST API refuse a longer one at trigger time; validate checks the characters
        "reason": Param(
            "manual rescale",
            type="string",
            minLength=1,
            maxLength=MAX_REASON,
            description=f"recorded with the new model: one line of text, at most {MAX_REASON} characters",
        ),
        "dry_run": Param(False, type="boolean", description="plan and show the new model, change nothing"),
        "decided_on": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            description=(
                "the model version the factor was chosen against (empty: the one active when the run starts); if "
                "another is active once the job's lock is taken, the rescale is planned again on it"
            ),
        ),
        "autosized": Param(
            False,
            type="boolean",
            description=(
                "the factor is an autosizer's decision (scale_evaluation sets it): if another model is active once "
                "the lock is taken, the autosizer is asked again and the run is skipped unless it still acts"
            ),
        ),
        "grouper": Param(
            None,
            type=["null", "string"],
            enum=[None, *sorted(GROUPERS)],
            description="how partitions and key buckets become virtual tasks; empty keeps the job's grouper",
        ),
        "lock_wait_s": seconds_param(
            LOCK_WAIT_S,
            "seconds to wait (on the triggerer) while another scaling step holds the job's lock; past it the run "
            "ends skipped, its note naming the holder",
            minimum=0,
        ),
        "catch_up_timeout_s": seconds_param(600, "seconds the new model may take to catch up with the input"),
        "restart_timeout_s": seconds_param(300, "seconds the job may take to restart on the new model"),
        "sequence_column": Param(
            None, type=["null", "string"], description="per-key sequence column in the sink, for the order check"
        ),
        "spark_master": Param(
            None, type=["null", "string"], description="Spark master of a catch-up run (empty: the job's default)"
        ),
    },
)
def elastic_rescale() -> None:
    @task
    def validate(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The request, with auto resolved by the autosizer; a bad factor, reason or an unknown job fails here,
        its reason pushed as the ``refusal`` XCom, which becomes the run's note (``pipelines_airflow.notes``)."""
        assert params is not None
        try:
            return _request(params).to_dict()
        except PipelinesError as e:
            refuse(str(e))

    def _request(params: dict[str, Any]) -> scaling.ScalingRequest:
        check_conf()  # a misspelt "factr" ran the default factor
        factor = params.get("factor")
        reason = check_reason(params["reason"])  # before the autosizer records a decision for a refused run
        autosized = bool(params.get("autosized"))
        if params.get("auto"):
            from pipelines.operations.autosize import evaluate

            decision = evaluate(PipelinesHook().home(), params["job"])
            print(f"autosizer: {decision.action} to factor {decision.factor}: " + "; ".join(decision.reasons))
            factor, reason, autosized = decision.factor, decision.reason_for(reason), True
        elif factor is None or (isinstance(factor, str) and not factor.strip()):
            raise ConfigError(f"no factor given: give a whole number from 1 to {max_factor()}, or turn auto on")
        home = PipelinesHook().home()
        request = scaling.ScalingRequest(
            params["job"],
            validate_factor(factor),
            reason,
            grouper=params.get("grouper") or None,
            autosized=autosized,
        )
        scaling.validate(home, request)  # the factor, the job; the plan task checks the rest
        decided_on = params.get("decided_on") or ControlPlane(home).job_models.active_version(request.job)
        request = replace(request, decided_on=decided_on)  # planned again if another is active once it has the lock
        master = params.get("spark_master")
        problem = master_problem(master) if master else None  # refused before the lock, not by the catch-up's JVM
        if problem is not None:
            raise ConfigError(f"spark_master: {problem}")
        return request

    @task
    def plan(request: dict[str, Any]) -> dict[str, Any]:
        with noted_failure():
            summary = scaling.plan(PipelinesHook().home(), scaling.ScalingRequest.from_dict(request))
        for key, value in summary.items():
            print(f"{key:>14}: {value}")
        return summary

    @task
    def proceed(summary: dict[str, Any], params: dict[str, Any] | None = None) -> None:
        """Skips the scaling path (the run's note says why) for a dry run and for a plan that changes nothing."""
        assert params is not None
        if params["dry_run"]:
            skip(f"dry run: the plan of v{summary['to_version']} (in the plan task's log) was not applied")
        if not summary["changes"]:
            scaling.settle_abandoned(PipelinesHook().home(), summary["job"])  # a killed operation's lock and event
            skip(f"job {summary['job']} already runs this model (factor {summary['from_factor']}): nothing to do")

    # arg-type: Airflow types a @task call with the function's own parameters, so an XComArg (the upstream task's
    # value, resolved at run time) cannot pass; its Task protocol says so itself (airflow.sdk.bases.decorator).
    request = validate()
    proceed(plan(request)) >> scaling_path(request)  # type: ignore[arg-type]


elastic_rescale()
