"""A DAG left unpaused runs on its schedule: ``repartition_watch`` when its input watcher sees a repartitioned input.

``scripts/airflow.sh`` and ``docker-compose.yaml`` register DAGs unpaused
(``AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False``); the session's test
Airflow pauses them at creation so that no schedule loads the suite. This test
unpauses ``repartition_watch``, has its file parsed again (an asset's watcher is
registered for unpaused DAGs, at a parse), and gives a job of the session's home
an input change it cannot absorb (the cheapest change to act on: no Spark). The
triggerer's watcher must see it and the scheduler start an asset-triggered run,
which refuses the change with its note; then the job's model is made to match
its input again, so no later look finds anything, and the DAG is paused.
"""

from __future__ import annotations

import time

from pipelines.control import ControlPlane
from pipelines.core.groupers import plan_job_model
from pipelines.jobs.config import CONFIG_KEY, JobConfig, job_config
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.e2e.airflow_fixtures import REPO, AirflowClient

DAG = "repartition_watch"
JOB, STREAM = "watched_by_airflow", "watched_events"  # the session's Airflow home is shared: names of this test's own


def test_an_unpaused_repartition_watch_runs_when_its_watcher_sees_an_input_change(
    running_airflow: AirflowClient,
) -> None:
    home = Home(running_airflow.pipelines_home)
    details = running_airflow.wait_for_dag(DAG)
    before = {r["dag_run_id"] for r in running_airflow.runs(DAG)}
    running_airflow.pause(DAG, False)
    control = ControlPlane(home)
    try:
        running_airflow.json("PUT", f"/api/v2/parseDagFile/{details['file_token']}", expect=(200, 201))
        DeltaLog(home.streams).create(STREAM, 4)
        raw = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml").to_dict()
        raw.update(
            name=JOB,
            grouper="GroupByPartitionFixedTaskNum",
            inputs=[{"system": "deltalog", "stream": STREAM}],
            sink={"table": f"{JOB}_out"},
            dead_letter={"table": f"{JOB}_dead"},
        )
        create_job(home, JobConfig.from_dict(raw))
        v1 = control.job_models.active(JOB)
        [stream] = job_config(v1).inputs
        config = {CONFIG_KEY: v1.config[CONFIG_KEY]}
        control.job_models.save(
            plan_job_model(JOB, 2, {stream: 3}, grouper=v1.grouper, config=config), reason="the input had 3"
        )
        control.job_models.activate(JOB, 2)  # 3 -> 4 partitions: SEP-5 cannot keep keys on their tasks
        deadline = time.monotonic() + 240  # the parse, the watcher's start on the triggerer, a look, the scheduler
        woken: list[dict[str, object]] = []
        while not woken:
            assert time.monotonic() < deadline, f"no asset-triggered run of {DAG}: {running_airflow.runs(DAG)}"
            woken = [
                r
                for r in running_airflow.runs(DAG)
                if r["run_type"] == "asset_triggered" and r["dag_run_id"] not in before
            ]
            time.sleep(2)
        run_id = str(woken[0]["dag_run_id"])
        assert running_airflow.wait_for_run(DAG, run_id, timeout=300) == "failed"
        run = running_airflow.json("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}")
        assert (run["note"] or "").startswith(f"Refused by refuse_invalid: {JOB}: "), run["note"]
        assert control.job_models.active_version(JOB) == 2  # refused: the job keeps its model
    finally:
        running_airflow.pause(DAG, True)
        if control.job_models.active_version(JOB) == 2:  # nothing left for the watcher to find, whoever looks next
            v2 = control.job_models.active(JOB)
            [stream] = job_config(v2).inputs
            matching = plan_job_model(
                JOB, 3, {stream: 4}, grouper=v2.grouper, config={CONFIG_KEY: v2.config[CONFIG_KEY]}
            )
            control.job_models.save(matching, reason="the input's 4 partitions")
            control.job_models.activate(JOB, 3)
