"""Two scaling DAGs reach one job at the same moment, through the running Airflow: they queue, neither fails.

The autosizer's rescale (the conf ``scale_evaluation`` sends: a factor, the
model it was decided on, ``autosized``) and ``repartition_watch``'s absorption
of an expansion are triggered back to back. Whichever takes the job's lock
first runs; the other waits for it on the triggerer and plans again against
the model that is then active. Both runs end green (or skipped, with the
reason as the run's note), and the job ends on a model that reflects both.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock
from pipelines.demo.producer import produce
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.e2e.airflow_fixtures import REPO, AirflowClient

JOB, STREAM = "collide", "collide_events"  # the session's Airflow home is shared: names of this test's own


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_autosizer_rescale_and_an_expansion_at_the_same_moment_queue_and_both_end_green(
    running_airflow: AirflowClient, spark: Any
) -> None:
    home = Home(running_airflow.pipelines_home)
    raw = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml").to_dict()
    raw.update(
        name=JOB,
        inputs=[{"system": "deltalog", "stream": STREAM}],
        process_options={"latency_ms": 0},
        sink={"table": f"{JOB}_out"},
        dead_letter={"table": f"{JOB}_dead"},
        batch={"max_records": 200, "trigger_interval": "0 seconds"},
    )
    config = JobConfig.from_dict(raw)
    log = DeltaLog(home.streams)
    log.create(STREAM, 2)
    produce(log, home, STREAM, 200, 20, seed=1)
    create_job(home, config)
    # read to the end (on this test's Spark), so neither operation needs a catch-up run's Spark application
    run_job(spark, home, JOB, available_now=True, progress=lambda m: None)
    for dag in ("elastic_rescale", "repartition_watch"):
        running_airflow.wait_for_dag(dag)

    log.expand(STREAM, 4)
    conf = {"job": JOB, "factor": 2, "reason": "autosize up: e2e", "decided_on": 1, "autosized": True}
    try:
        rescale = running_airflow.trigger("elastic_rescale", conf)
        watch = running_airflow.trigger("repartition_watch")
        rescale_state = running_airflow.wait_for_run("elastic_rescale", rescale, timeout=900)
        watch_state = running_airflow.wait_for_run("repartition_watch", watch, timeout=900)
        assert (rescale_state, watch_state) == ("success", "success")
        control = ControlPlane(home)
        if sorted(control.job_models.active(JOB).partitions().values()) != [4]:
            # the watch looked while the rescale held the lock: the next look absorbs it (the input watcher's, once
            # the DAG's next parse registers it; here, as an operator would, one more run)
            again = running_airflow.trigger("repartition_watch")
            assert running_airflow.wait_for_run("repartition_watch", again, timeout=900) == "success"
        absorbed = _wait_for_partitions(running_airflow, control, 4, timeout=300)
    finally:
        running_airflow.pause("repartition_watch", True)
        running_airflow.pause("elastic_rescale", True)

    rescaled = _run(running_airflow, "elastic_rescale", rescale)
    begin = _states(running_airflow, "elastic_rescale", rescale)["scale.begin"]
    model = control.job_models.active(JOB)
    events = [(e.kind, e.status, e.from_version, e.to_factor) for e in control.events.history(JOB)]
    print(f"[e2e] rescale: scale.begin {begin}, note {rescaled['note']!r}; absorbed by {absorbed}; events {events}")
    assert sorted(model.partitions().values()) == [4]  # the expansion is in force, either way
    if begin == "success":  # the rescale went first (or the watch's look found the lock busy): factor 2, then absorbed
        assert model.elasticity_factor == 2 and rescaled["note"] is None, (model.version, rescaled)
        assert ("rescale", "verified", 1, 2) in events
    else:  # the absorption went first: the autosizer, asked again on its model, held; the run says so
        assert begin == "skipped" and model.elasticity_factor == 1, (begin, model.version)
        note = rescaled["note"] or ""
        went_first = f"Skipped by scale.begin: the rescale of {JOB} was decided on v1; v2 is active now"
        assert note.startswith(went_first), note
        assert "and the autosizer asked again says " in note and note.endswith("Nothing was changed."), note
        assert all(kind == "partition expansion" for kind, *_ in events), events
    assert all(status == "verified" for _, status, *_ in events), events  # every operation that ran, verified
    assert control.events.history(JOB)[-1].finished_at is not None
    lock = ScalingLock(home).state(JOB)
    assert lock is not None and not lock.held, lock  # released by the last operation's teardown


def _wait_for_partitions(airflow: AirflowClient, control: ControlPlane, count: int, *, timeout: float) -> str:
    """Until the active model reads ``count`` partitions; which watch run absorbed them."""
    deadline = time.monotonic() + timeout
    while sorted(control.job_models.active(JOB).partitions().values()) != [count]:
        assert time.monotonic() < deadline, f"no model of {JOB} with {count} partitions after {timeout:.0f} s"
        time.sleep(3)
    for event in reversed(control.events.history(JOB)):
        if event.kind == "partition expansion":
            owner = str(event.details.get("owner", ""))
            run_id = owner.split(":", 2)[-1].split("#")[0]
            assert airflow.wait_for_run("repartition_watch", run_id, timeout=600) == "success"
            return owner
    raise AssertionError(f"the expansion of {JOB} was absorbed by no scaling event")


def _run(airflow: AirflowClient, dag: str, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = airflow.json("GET", f"/api/v2/dags/{dag}/dagRuns/{run_id}")
    return run


def _states(airflow: AirflowClient, dag: str, run_id: str) -> dict[str, str]:
    return {ti["task_id"]: ti["state"] for ti in airflow.task_instances(dag, run_id)}
