"""Absorb repartitioned inputs: when the input watcher sees one (and hourly), compare each job's inputs with its model.

A growth to a multiple of the partition count is absorbed by the next model with the job's grouper
(SEP-5: keys stay with their tasks, the task count does not change), through the same
lock → migrate → activate → restart → verify path as `elastic_rescale`. A shrink or a non-multiple
growth fails the run with the reason, and the job stays on its current model. A job whose lock is held
by another scaling step when the watch looks is looked at again once that step ends; one taken between the look and
the absorption's start is waited for (`lock_wait_s`), and the absorption is then planned on the model in force.

The DAG runs on the asset the input watcher updates (`pipelines_input_changes`: a trigger on Airflow's triggerer
that looks at every job's inputs every 20 s and fires only when it finds something to do), and once an hour
whatever it found; a run every minute made a row of skipped tasks each time there was nothing to absorb.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import task
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.notes import refuse
from pipelines_airflow.platform_dag import hourly_and_on, platform_dag
from pipelines_airflow.run_conf import check_conf
from pipelines_airflow.scaling import LOCK_WAIT_S, scaling_path, seconds_param
from pipelines_airflow.watchers import INPUT_CHANGES

from pipelines.operations import repartition


@platform_dag(
    "repartition_watch",
    "scaling",
    description="Absorbs a repartitioned input (Kafka partitions added, Kinesis reshards), keys kept on their tasks",
    doc_md=__doc__,
    # The hourly look is the watcher's backstop: a DAG unpaused has its watcher only from its next parse on.
    schedule=hourly_and_on(INPUT_CHANGES),
    params={
        "catch_up_timeout_s": seconds_param(600, "seconds a new model may take to catch up with the input"),
        "restart_timeout_s": seconds_param(300, "seconds a job may take to restart on its new model"),
        "lock_wait_s": seconds_param(
            LOCK_WAIT_S,
            "seconds an absorption waits (on the triggerer) while another scaling step holds the job's lock; past "
            "it the absorption ends skipped and the watcher fires again",
            minimum=0,
        ),
    },
)
def repartition_watch() -> None:
    @task
    def detect() -> list[dict[str, Any]]:
        check_conf()
        changes = repartition.detect(PipelinesHook().home())
        for c in changes:
            state = "refused" if c.error else ("busy" if c.busy else "absorb")
            print(f"{c.job}: {c.stream} {c.before} -> {c.after} partitions: {state} {c.error or c.busy or ''}")
        if not changes:
            print("every job's inputs match its active model")
        return [c.to_dict() for c in changes]

    @task
    def absorbable(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found = [repartition.InputChange(**c) for c in changes]
        return [c.request().to_dict() for c in found if c.error is None and c.busy is None]

    @task
    def settle(changes: list[dict[str, Any]]) -> list[str]:
        """What a killed absorption left on a job with nothing to absorb now (its lock, its open event)."""
        return repartition.settle_unchanged(PipelinesHook().home(), [repartition.InputChange(**c) for c in changes])

    @task
    def refuse_invalid(changes: list[dict[str, Any]]) -> None:
        """Fail the run, naming every input change that cannot be absorbed; those jobs keep their models."""
        errors = [f"{c['job']}: {c['error']}" for c in changes if c["error"]]
        if errors:
            refuse("; ".join(errors))  # the run's note

    # arg-type: Airflow types a @task call with the function's own parameters, so an XComArg (the upstream task's
    # value, resolved at run time) cannot pass; its Task protocol says so itself (airflow.sdk.bases.decorator).
    changes = detect()
    settle(changes)  # type: ignore[arg-type]
    scaling_path.expand(request=absorbable(changes))  # type: ignore[arg-type]
    refuse_invalid(changes)  # type: ignore[arg-type]


repartition_watch()
