"""The running Airflow through its REST API: a smoke test of the fixture, then a rescale driven end to end."""

from __future__ import annotations

import time

import httpx
import pytest

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.deltaio import read_delta
from pipelines.demo.producer import produce
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.quality.verify import verify_job
from pipelines.runtime import launcher
from pipelines.systems.deltalog import DeltaLog
from tests.e2e.airflow_fixtures import REPO, AirflowClient, listening_sockets


def test_running_airflow_answers_with_a_token_and_lists_dags(running_airflow: AirflowClient) -> None:
    version = running_airflow.json("GET", "/api/v2/version")
    assert version["version"].startswith("3."), version
    dags = running_airflow.json("GET", "/api/v2/dags", params={"limit": 100})
    assert "dags" in dags and "total_entries" in dags, dags
    # the elastic_pipelines plugin loaded, with its FastAPI app and its menu entry
    plugins = {p["name"]: p for p in running_airflow.json("GET", "/api/v2/plugins")["plugins"]}
    assert "elastic_pipelines" in plugins, sorted(plugins)
    plugin = plugins["elastic_pipelines"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/elastic-pipelines"]
    assert [v["url_route"] for v in plugin["external_views"]] == ["elastic-pipelines"]
    errors = running_airflow.json("GET", "/api/v2/plugins/importErrors")["import_errors"]
    assert not [e for e in errors if "elastic_pipelines" in e["source"] or "pipelines_airflow" in e["source"]], errors
    # no token, no answer
    assert httpx.get(f"{running_airflow.base_url}/api/v2/dags", timeout=30).status_code == 401
    # nothing of ours listens beyond loopback
    sockets = listening_sockets(running_airflow.servers.pids())
    assert sockets, "the api-server should be listening"
    assert all(ip in ("127.0.0.1", "::1") for _, _, ip, _ in sockets), sockets


ENRICHMENT = REPO / "include" / "jobs" / "enrichment.yaml"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two Spark runs (one inside Airflow) on a shared 2-core machine
def test_elastic_rescale_through_the_rest_api_keeps_the_output_complete_and_in_order(
    running_airflow: AirflowClient,
) -> None:
    """Factor 1 → 4 on the demo job, triggered like an operator would: REST API, typed conf, a real scheduler."""
    if not (REPO / "dags" / "elastic_rescale.py").exists():
        pytest.fail("dags/elastic_rescale.py is missing: this test drives that DAG")
    home = Home(running_airflow.pipelines_home)  # the home the Airflow tasks see (PIPELINES_HOME)
    config = JobConfig.load(ENRICHMENT)
    job, (stream,) = config.name, [i.stream for i in config.inputs]
    log = DeltaLog(home.streams)
    log.create(stream, 2)
    produce(log, home, stream, 600, 40, seed=1)
    create_job(home, config)
    assert ControlPlane(home).job_models.active(job).elasticity_factor == 1
    started = time.monotonic()
    code = launcher.run(home, job, available_now=True, master="local[2]", detach=False)
    assert code == 0, f"the factor-1 run of {job} exited with {code}"
    print(f"[e2e] factor-1 run took {time.monotonic() - started:.1f} s")
    before = verify_job(home, job, sequence="seq")
    assert before.ok, before.summary()
    produce(log, home, stream, 600, 40, seed=2)  # a backlog for the new model

    running_airflow.wait_for_dag("elastic_rescale")
    conf = {"job": job, "factor": 4, "reason": "e2e: scale up through the REST API", "dry_run": False}
    run_id = running_airflow.trigger("elastic_rescale", conf)
    # a second rescale triggered at once: it waits (max_active_runs=1), then finds the job already at factor 4
    second = running_airflow.trigger("elastic_rescale", {**conf, "reason": "e2e: the same request, twice"})
    state = running_airflow.wait_for_run("elastic_rescale", run_id, timeout=1200)
    assert state == "success", f"elastic_rescale run {run_id} ended {state} (task logs printed above)"
    assert running_airflow.wait_for_run("elastic_rescale", second, timeout=600) == "success"
    first_run = running_airflow.json("GET", f"/api/v2/dags/elastic_rescale/dagRuns/{run_id}")
    second_run = running_airflow.json("GET", f"/api/v2/dags/elastic_rescale/dagRuns/{second}")
    assert second_run["start_date"] >= first_run["end_date"], (first_run, second_run)  # it waited its turn
    tis = running_airflow.json("GET", f"/api/v2/dags/elastic_rescale/dagRuns/{second}/taskInstances")
    states = {ti["task_id"]: ti["state"] for ti in tis["task_instances"]}
    assert states["proceed"] == "success" and states["scale.begin"] == "skipped", states  # nothing to do

    control = ControlPlane(home)
    model = control.job_models.active(job)
    assert model.elasticity_factor == 4 and model.version == 2, (model.version, model.elasticity_factor)
    assert model.task_count == 8  # 2 partitions x 4 key buckets
    events = control.events.history(job)
    assert [(e.from_factor, e.to_factor) for e in events] == [(1, 4)], events
    assert events[-1].finished_at is not None, events[-1]  # the DAG's teardown closed the event ...
    assert events[-1].status not in ("failed", "dq failed", "rolled back"), events[-1]  # ... as a success
    verdict = verify_job(home, job, sequence="seq")
    assert verdict.ok, verdict.summary()
    # the new model processed the backlog: every one of the 1200 records is in the sink or the dead letters
    sink = read_delta(home.sinks / config.sink_table).to_pandas()
    dead = read_delta(home.sinks / config.dead_letter_table).to_pandas()
    assert len(sink) + len(dead) == 1200, (len(sink), len(dead))
    assert set(sink["model_version"]) == {1, 2}
    window = verify_job(home, job, sequence="seq", event=events[-1].event_id)
    assert window.ok, window.summary()
