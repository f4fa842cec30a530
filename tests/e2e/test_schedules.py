"""A scheduled DAG runs on its schedule once it is unpaused, as the README's local Airflow leaves it.

``scripts/airflow.sh`` and ``docker-compose.yaml`` register DAGs unpaused
(``AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False``); the session's test
Airflow pauses them at creation so that no schedule loads the suite, and this
test unpauses the cheapest one, ``repartition_watch`` (every minute: it compares
each job's inputs with its model), until the scheduler has made and finished one
run of its own, then pauses it again.
"""

from __future__ import annotations

import time

from tests.e2e.airflow_fixtures import AirflowClient

DAG = "repartition_watch"


def test_an_unpaused_scheduled_dag_gets_a_scheduled_run_that_succeeds(running_airflow: AirflowClient) -> None:
    running_airflow.wait_for_dag(DAG)
    before = {r["dag_run_id"] for r in running_airflow.runs(DAG)}
    running_airflow.pause(DAG, False)
    try:
        deadline = time.monotonic() + 150  # the timetable's next minute, on a loaded 2-core machine
        scheduled: list[dict[str, object]] = []
        while not scheduled:
            assert time.monotonic() < deadline, f"no scheduled run of {DAG}: {running_airflow.runs(DAG)}"
            scheduled = [
                r for r in running_airflow.runs(DAG) if r["run_type"] == "scheduled" and r["dag_run_id"] not in before
            ]
            time.sleep(2)
        run_id = str(scheduled[0]["dag_run_id"])
        assert running_airflow.wait_for_run(DAG, run_id, timeout=300) == "success"  # runs only while unpaused
    finally:
        running_airflow.pause(DAG, True)  # no further run while the rest of the suite works
    details = running_airflow.json("GET", f"/api/v2/dags/{DAG}")
    assert details["timetable_summary"] and details["next_dagrun_run_after"] is not None
