"""A scaling run says how it ended in Airflow's UI: refused, skipped or failed, the reason is the DAG run's note.

``elastic_rescale`` takes its factor as typed (Airflow's trigger form keeps
the text, see the DAG) and its ``validate`` task refuses what is not a factor
it may run, naming why. A scaling step that has nothing left to do, or waited
for the job's lock past its bound, ends the run skipped (``skip``); a step
that fails leaves its error (``noted_failure``). A task of Airflow 3 cannot
write its own run's note (tasks reach Airflow only through the execution API,
which has no such call), so the task pushes the reason as an XCom (``refusal``,
``skipped``, ``failure``) and this listener, which the scheduler calls when the
run ends (``on_dag_run_failed`` / ``on_dag_run_success``, inside the
scheduler's own transaction), copies it into the run's note: the run's page
and the grid show it where an operator looks, instead of a task log. An
operator's own note is never replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from airflow.listeners import hookimpl

REFUSAL = "refusal"
"""The XCom key a task sets to the reason it refused the run."""
SKIPPED = "skipped"
"""The XCom key a task sets to the reason it skipped the rest of the run (nothing was changed)."""
FAILURE = "failure"
"""The XCom key a task sets to the error it failed with."""
NOTED = {"elastic_rescale", "repartition_watch"}
"""The DAGs whose runs get a note."""
NOTE_MAX = 1000
"""Airflow's limit on a run's note."""
WHAT_TO_DO = (
    "The job's scaling events on the Elastic pipelines page say which model is in force (record_event settled the "
    "operation); fix the cause named here, then trigger the run again."
)


def refuse(reason: str) -> NoReturn:
    """End this task failed, ``reason`` the run's note and one ``error:`` line of its log; call from a running task.

    A refusal is bad input, not a fault, and is said as the CLI says it: one line, exit 2. Airflow's task runner
    logs a ``SystemExit`` as "Task exited" with its code, where an exception drags in the traceback of the
    runner's own frames (fourteen of them above the line that refused); it fails the task as an exception
    does, retried only if the task has retries (the tasks that refuse have none).
    """
    import sys

    from airflow.sdk import get_current_context

    get_current_context()["ti"].xcom_push(key=REFUSAL, value=reason)
    print(f"error: {reason}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def skip(reason: str) -> NoReturn:
    """End this task skipped (its downstream too) with ``reason`` as the run's note; call from a running task."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowSkipException

    get_current_context()["ti"].xcom_push(key=SKIPPED, value=reason)
    raise AirflowSkipException(reason)


@contextmanager
def noted_failure() -> Iterator[None]:
    """Around a task's work: an error it raises becomes the run's note (and is raised on, as it was)."""
    from airflow.sdk.exceptions import AirflowSkipException

    try:
        yield
    except AirflowSkipException:
        raise
    except Exception as error:
        from airflow.sdk import get_current_context

        try:
            ti = get_current_context()["ti"]
        except RuntimeError:  # called outside a running task (a test of the operator): nothing to note it on
            raise error from None
        ti.xcom_push(key=FAILURE, value=f"{type(error).__name__}: {error}")
        raise


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    _in_session(dag_run, _failed)


@hookimpl
def on_dag_run_success(dag_run: Any, msg: str) -> None:
    _in_session(dag_run, _skipped)


def _in_session(dag_run: Any, note: Any) -> None:
    if dag_run.dag_id not in NOTED:
        return
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is not None:  # the scheduler's: the note commits with the run's new state
        note(session, dag_run)
        return
    from airflow.models import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as own:  # a run updated outside a session (``dag.test``): note it in one of ours
        run = own.scalar(select(DagRun).where(DagRun.dag_id == dag_run.dag_id, DagRun.run_id == dag_run.run_id))
        if run is not None:
            note(own, run)


def _failed(session: Any, dag_run: Any) -> None:
    refusal = _said(session, dag_run, REFUSAL)
    if refusal:
        task, reason = refusal[0]
        _set(dag_run, f"Refused by {task}: {reason}. Nothing was changed.")
        return
    failures = _said(session, dag_run, FAILURE)
    if failures:
        _set(dag_run, " ".join(f"Failed at {task}: {error}." for task, error in failures) + " " + WHAT_TO_DO)


def _skipped(session: Any, dag_run: Any) -> None:
    skips = _said(session, dag_run, SKIPPED)
    if skips:
        _set(dag_run, " ".join(f"Skipped by {task}: {reason}." for task, reason in skips) + " Nothing was changed.")


def _said(session: Any, dag_run: Any, key: str) -> list[tuple[str, str]]:
    """``(task, value)`` of every XCom ``key`` of the run, mapped instances with their index, in task order."""
    from airflow.models.xcom import XComModel

    query = XComModel.get_many(run_id=dag_run.run_id, key=key, dag_ids=dag_run.dag_id)
    found = sorted(session.scalars(query), key=lambda x: (x.task_id, x.map_index))
    return [
        (x.task_id + (f"[{x.map_index}]" if x.map_index >= 0 else ""), str(XComModel.deserialize_value(x)))
        for x in found
    ]


def _set(dag_run: Any, note: str) -> None:
    if dag_run.note:  # an operator's own note is never replaced
        return
    dag_run.note = note if len(note) <= NOTE_MAX else note[: NOTE_MAX - 1] + "…"
