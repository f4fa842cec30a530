"""A triggered run's conf may name only its DAG's Params: a misspelt key is refused, never dropped.

Airflow merges a run's conf into the DAG's Params and checks each declared
Param's value, but keeps keys no Param declares without a word. So
``{"job": "enrichment", "factr": 8}`` ran ``elastic_rescale`` at the Param's
default factor, a rescale nobody asked for, and ``{"strems": ["events"]}``
had ``stream_maintenance`` trim every stream. The first task of each DAG
calls ``check_conf``; ``elastic_rescale``'s refusal becomes the run's note
(``notes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pipelines.core.limits import shown


def unknown_conf(conf: Mapping[str, Any] | None, params: Iterable[str]) -> str | None:
    """Why ``conf`` does not fit a DAG whose Params are ``params``, or None."""
    declared = sorted(params)
    unknown = sorted(str(key) for key in (conf or {}) if key not in declared)
    if not unknown:
        return None
    said = ", ".join(shown(key) for key in unknown)
    takes = f"it takes {', '.join(declared)}" if declared else "it takes no conf"
    return f"unknown conf key{'s' if len(unknown) > 1 else ''} {said}: {takes}"


def check_conf() -> None:
    """Refuse the running task's run if its conf names a key that none of its DAG's Params declares."""
    from airflow.sdk import get_current_context

    context = get_current_context()
    dag_run = context.get("dag_run")
    dag = context.get("dag")
    problem = unknown_conf(getattr(dag_run, "conf", None), dag.params.keys() if dag is not None else ())
    if problem is not None:
        from pipelines_airflow.notes import refuse

        refuse(problem)
