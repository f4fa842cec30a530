"""A refused run says why in Airflow's UI: the reason becomes the DAG run's note.

``elastic_rescale`` takes its factor as typed (Airflow's trigger form keeps
the text, see the DAG) and its ``validate`` task refuses what is not a factor
it may run, naming why. A task of Airflow 3 cannot write its own run's note
(tasks reach Airflow only through the execution API, which has no such call),
so the task pushes the reason as the XCom ``refusal`` and this listener, which
the scheduler calls when the run fails (``on_dag_run_failed``, inside the
scheduler's own transaction), copies it into the run's note: the run's page
and the grid show it where an operator looks, instead of a task log.
"""

from __future__ import annotations

from typing import Any

from airflow.listeners import hookimpl

REFUSAL = "refusal"
"""The XCom key a task sets to the reason it refused the run."""
NOTED = {"elastic_rescale": "validate"}
"""DAG id -> the task whose refusal becomes the note."""


@hookimpl
def on_dag_run_failed(dag_run: Any, msg: str) -> None:
    task = NOTED.get(dag_run.dag_id)
    if task is None:
        return
    from sqlalchemy.orm import object_session

    session = object_session(dag_run)
    if session is not None:  # the scheduler's: the note commits with the run's new state
        _note(session, dag_run, task)
        return
    from airflow.models import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as own:  # a run updated outside a session (``dag.test``): note it in one of ours
        run = own.scalar(select(DagRun).where(DagRun.dag_id == dag_run.dag_id, DagRun.run_id == dag_run.run_id))
        if run is not None:
            _note(own, run, task)


def _note(session: Any, dag_run: Any, task: str) -> None:
    from airflow.models.xcom import XComModel

    if dag_run.note:  # an operator's own note is never replaced
        return
    query = XComModel.get_many(run_id=dag_run.run_id, key=REFUSAL, task_ids=task, dag_ids=dag_run.dag_id, limit=1)
    found = session.scalars(query).first()
    if found is not None:
        dag_run.note = f"Refused by {task}: {XComModel.deserialize_value(found)}. Nothing was changed."
