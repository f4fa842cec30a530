"""What every DAG of the platform shares: one run at a time, no catch-up of missed intervals, the project's tag.

A missed hourly look is not worth replaying (the next one reads the same control tables), and two runs of one DAG
would only wait for each other's scaling lock; docs/airflow.md describes the DAGs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, dag


def platform_dag(dag_id: str, *areas: str, description: str, doc_md: str | None, **kwargs: Any) -> Callable[..., Any]:
    """Airflow's ``@dag`` with the platform's defaults, tagged ``elastic-pipelines`` and ``areas``."""
    return dag(
        dag_id=dag_id,
        description=description,
        catchup=False,
        max_active_runs=1,
        tags=["elastic-pipelines", *areas],
        doc_md=doc_md,
        **kwargs,
    )


def hourly_and_on(asset: Asset) -> AssetOrTimeSchedule:
    """Run when ``asset`` changes, and on the hour as the backstop of a change whose event was missed."""
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable("0 * * * *", timezone="UTC"), assets=[asset])
