"""The scaling path as Airflow tasks: one task per step of ``pipelines.operations.scaling``.

``elastic_rescale`` runs it once per run; ``repartition_watch`` maps it over
the jobs whose inputs grew. Taking the lock is a *setup* task and recording
the event (which releases the lock) its *teardown*, so Airflow runs the
release whatever failed in between, and skips it only when the lock was never
taken. The lock's owner is the run (plus the map index), so a retried or
cleared task of the same run resumes its own operation.

Run parameters read here, all optional (``elastic_rescale`` exposes them as
typed Params): ``lock_wait_s``, ``restart_timeout_s``, ``catch_up_timeout_s``,
``sequence_column``, ``spark_master``.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import get_current_context, task, task_group

from pipelines.control.dq_results import DagRunRef
from pipelines.operations import scaling
from pipelines_airflow.assets import JOB_MODELS, QUALITY, SCALING_EVENTS
from pipelines_airflow.hooks import PipelinesHook


def _home() -> Any:
    return PipelinesHook().home()


def _param(name: str, default: Any = None) -> Any:
    value = get_current_context()["params"].get(name, default)
    return default if value in (None, "") else value


def _op(op: dict[str, Any]) -> scaling.ScalingOperation:
    """The operation from its XCom (a JSON object): typed, so a missing field fails here, by name."""
    return scaling.ScalingOperation.of(op)


def run_owner() -> str:
    """Stable across retries and clears of this run's task, distinct for every run and mapped instance."""
    context = get_current_context()
    ti = context["ti"]
    index = getattr(ti, "map_index", -1)
    suffix = f"#{index}" if index is not None and index >= 0 else ""
    return f"airflow:{ti.dag_id}:{context['run_id']}{suffix}"


@task
def begin(request: dict[str, Any]) -> dict[str, Any]:
    """Take the job's scaling lock (waiting ``lock_wait_s``), settle earlier unfinished operations, open the event."""
    op = scaling.begin(
        _home(),
        scaling.ScalingRequest.from_dict(request),
        run_owner(),
        lock_wait_s=float(_param("lock_wait_s", 0)),
    )
    return op.to_dict()


@task
def stop_at_batch_boundary(op: dict[str, Any]) -> str:
    return str(scaling.stop(_home(), _op(op))["mode"])


@task
def migrate_checkpoints(op: dict[str, Any]) -> int:
    return scaling.migrate(_home(), _op(op))["to_version"]


@task(outlets=[JOB_MODELS])
def activate_model(op: dict[str, Any]) -> int:
    return scaling.activate(_home(), _op(op))["to_version"]


@task
def restart_job(op: dict[str, Any], mode: str) -> str:
    timeout = float(_param("restart_timeout_s", 300))
    return scaling.restart(_home(), _op(op), mode, master=_param("spark_master"), timeout_s=timeout)["restarted"]


@task
def wait_caught_up(op: dict[str, Any]) -> float:
    timeout = float(_param("catch_up_timeout_s", 600))
    return scaling.wait_caught_up(_home(), _op(op), timeout_s=timeout)["caught_up_s"]


def dag_run() -> DagRunRef:
    """This task's DAG run, recorded with the verdicts it produces so the UI can link a verdict to its run."""
    context = get_current_context()
    return DagRunRef(context["ti"].dag_id, context["run_id"])


@task(outlets=[QUALITY])
def verify_quality(op: dict[str, Any]) -> str:
    return scaling.verify(_home(), _op(op), sequence=_param("sequence_column"), dag_run=dag_run())["dq"]


@task(outlets=[SCALING_EVENTS])
def record_event(op: dict[str, Any]) -> dict[str, Any]:
    """Close the scaling event with its figures and release the lock (the teardown of ``begin``)."""
    return scaling.finish(_home(), _op(op))


@task_group(group_id="scale")
def scaling_path(request: dict[str, Any]) -> None:
    """begin → stop → migrate → activate → restart → catch up → verify, and record (teardown)."""
    op = begin(request)
    mode = stop_at_batch_boundary(op)
    migrated = migrate_checkpoints(op)
    activated = activate_model(op)
    restarted = restart_job(op, mode)
    caught_up = wait_caught_up(op)
    verified = verify_quality(op)
    recorded = record_event(op).as_teardown(setups=op)
    mode >> migrated >> activated >> restarted >> caught_up >> verified >> recorded
