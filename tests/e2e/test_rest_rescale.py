"""The running Airflow through its REST API: a smoke test of the fixture, then a rescale driven end to end."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from pipelines.control import ControlPlane
from pipelines.deltaio import read_delta
from pipelines.demo.producer import produce
from pipelines.errors import PipelinesError
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.quality.verify import verify_job
from pipelines.runtime import launcher
from pipelines.storage.home import Home
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
LATENCY_MS = 25
"""Per record, as a sleep: at most 2 / 25 ms = 80 records/s on local[2] at any factor, a floor under every wait."""
FIRST = 300
"""Records the factor-1 driver reads before the rescale: >= 2 s of work at its pace."""
BACKLOG = 1500
"""Produced before the activation: >= 19 s of catch-up for the new model at 80 records/s, long enough for the
test to see each wait deferred (it polls every 0.5 s)."""
DEFERRED_TASKS = ("scale.restart_job", "scale.wait_caught_up")


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a Spark driver and a rescale through the scheduler on a shared 2-core machine
def test_elastic_rescale_through_the_rest_api_switches_a_live_driver_and_waits_deferred(
    running_airflow: AirflowClient,
) -> None:
    """Factor 1 → 4 of a running job, triggered like an operator would: REST API, typed conf, a real scheduler.

    The job's driver runs continuously, so the rescale switches it in place, and the scaling path waits twice:
    for the switch and for the new model to catch up. Those waits are deferred to the triggerer: while the new
    model works through a backlog the test produced just before the activation, the waiting task instance is
    ``deferred`` (holding no worker slot), its trigger is the scaling trigger, and the run still succeeds.
    """
    if not (REPO / "dags" / "elastic_rescale.py").exists():
        pytest.fail("dags/elastic_rescale.py is missing: this test drives that DAG")
    home = Home(running_airflow.pipelines_home)  # the home the Airflow tasks see (PIPELINES_HOME)
    raw = JobConfig.load(ENRICHMENT).to_dict()
    raw["process_options"] = {"latency_ms": LATENCY_MS}
    raw["batch"] = {"max_records": 200, "trigger_interval": "1 second"}
    config = JobConfig.from_dict(raw)
    job, (stream,) = config.name, [i.stream for i in config.inputs]
    log = DeltaLog(home.streams)
    log.create(stream, 2)
    produce(log, home, stream, FIRST, 40, seed=1)
    create_job(home, config)
    assert ControlPlane(home).job_models.active(job).elasticity_factor == 1
    started = time.monotonic()
    launcher.run(home, job, available_now=False, master="local[2]", detach=True)
    try:
        _wait_processed(home, job, 1, timeout=600)
        print(f"[e2e] the factor-1 driver read the first {FIRST} records {time.monotonic() - started:.1f} s in")
        before = verify_job(home, job, sequence="seq")
        assert before.ok, before.summary()
        running_airflow.wait_for_dag("elastic_rescale")
        conf = {"job": job, "factor": 4, "reason": "e2e: scale up through the REST API", "dry_run": False}
        run_id = running_airflow.trigger("elastic_rescale", conf)
        # a second rescale triggered at once: it waits (max_active_runs=1), then finds the job already at factor 4
        second = running_airflow.trigger("elastic_rescale", {**conf, "reason": "e2e: the same request, twice"})
        seen = _follow(running_airflow, home, log, stream, run_id, timeout=1200)
        state = running_airflow.wait_for_run("elastic_rescale", run_id, timeout=60)
        assert state == "success", f"elastic_rescale run {run_id} ended {state} (task logs printed above)"
        assert running_airflow.wait_for_run("elastic_rescale", second, timeout=600) == "success"
    finally:
        stopped = launcher.stop(home, job, timeout=120)
        if not stopped:
            launcher.kill(home, job)
    assert stopped, "the driver did not stop at a batch boundary within 120 s"

    # While the new model caught up, a wait was deferred: on the triggerer, with the scaling trigger, in no slot.
    deferred = {task: ti for task, ti in seen.items() if ti is not None}
    assert deferred, f"no scaling wait was seen deferred: {seen}"
    for task, ti in deferred.items():
        assert ti["trigger"]["classpath"] == "pipelines_airflow.triggers.ScalingWaitTrigger", (task, ti)
    tis = running_airflow.task_instances("elastic_rescale", run_id)
    states = {ti["task_id"]: ti["state"] for ti in tis}
    assert all(states[t] == "success" for t in DEFERRED_TASKS), states
    first_run = running_airflow.json("GET", f"/api/v2/dags/elastic_rescale/dagRuns/{run_id}")
    second_run = running_airflow.json("GET", f"/api/v2/dags/elastic_rescale/dagRuns/{second}")
    assert second_run["start_date"] >= first_run["end_date"], (first_run, second_run)  # it waited its turn
    tis = running_airflow.json("GET", f"/api/v2/dags/elastic_rescale/dagRuns/{second}/taskInstances")
    states = {ti["task_id"]: ti["state"] for ti in tis["task_instances"]}
    assert states["proceed"] == "skipped" and states["scale.begin"] == "skipped", states  # nothing to do
    assert second_run["note"] == (
        f"Skipped by proceed: job {job} already runs this model (factor 4): nothing to do. Nothing was changed."
    ), second_run

    control = ControlPlane(home)
    model = control.job_models.active(job)
    assert model.elasticity_factor == 4 and model.version == 2, (model.version, model.elasticity_factor)
    assert model.task_count == 8  # 2 partitions x 4 key buckets
    events = control.events.history(job)
    assert [(e.from_factor, e.to_factor) for e in events] == [(1, 4)], events
    event = events[-1]
    assert event.finished_at is not None and event.status == "verified", event  # closed by the DAG's teardown
    assert event.details["mode"] == "in-place" and event.details["dq"] == "pass", event.details
    assert event.details["downtime_s"] is not None and event.details["records_replayed"] == 0, event.details
    verdict = verify_job(home, job, sequence="seq")
    assert verdict.ok, verdict.summary()
    # every record is in the sink or the dead letters, once, and the new model processed part of them
    sink = read_delta(home.sinks / config.sink_table).to_pandas()
    dead = read_delta(home.sinks / config.dead_letter_table).to_pandas()
    assert len(sink) + len(dead) == FIRST + BACKLOG, (len(sink), len(dead))
    assert set(sink["model_version"]) == {1, 2}
    window = verify_job(home, job, sequence="seq", event=event.event_id)
    assert window.ok, window.summary()


def _wait_processed(home: Home, job: str, version: int, *, timeout: float) -> None:
    """Until ``version``'s checkpoints reach every input's end as of now."""
    from pipelines.operations.scaling.readings import end_positions
    from pipelines.operations.scaling.switch import catch_up_state

    target, deadline = end_positions(home, job), time.monotonic() + timeout
    while True:
        try:
            done, behind = catch_up_state(home, job, version, target)
        except PipelinesError:  # no checkpoint of the version yet
            done, behind = False, None
        if done:
            return
        assert time.monotonic() < deadline, f"v{version} of {job} still {behind} records behind after {timeout:.0f}s"
        time.sleep(1)


def _follow(
    airflow: AirflowClient, home: Home, log: DeltaLog, stream: str, run_id: str, *, timeout: float
) -> dict[str, dict[str, Any] | None]:
    """Watch the run's task instances until it ends; produce the backlog once the lock is taken.

    The backlog arrives before the activation (``activate_model`` notes the inputs' ends as the catch-up
    target), too late for the old model to read much of it: at most 80 records/s while the stop and migrate
    steps run. So the new model starts well behind, and needs at least ``LATENCY_MS`` per record to catch up.
    Returns, per waiting task, the task instance as the API showed it while it was deferred (or None).
    """
    deferred: dict[str, dict[str, Any] | None] = dict.fromkeys(DEFERRED_TASKS)
    seen_deferred: dict[str, list[float]] = {task: [] for task in DEFERRED_TASKS}  # when each poll saw it deferred
    produced = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        airflow.servers.check_alive()
        tis = {ti["task_id"]: ti for ti in airflow.task_instances("elastic_rescale", run_id)}
        if not produced and (tis.get("scale.begin") or {}).get("state") == "success":
            assert (tis.get("scale.activate_model") or {}).get("state") in (None, "scheduled", "queued"), tis
            produce(log, home, stream, BACKLOG, 40, seed=2)
            produced = True
            print(f"[e2e] produced a backlog of {BACKLOG} records before the activation")
        for task in DEFERRED_TASKS:
            ti = tis.get(task) or {}
            if ti.get("state") == "deferred":
                seen_deferred[task].append(time.monotonic())
            if ti.get("state") == "deferred" and deferred[task] is None:
                pool = airflow.json("GET", f"/api/v2/pools/{ti['pool']}")
                print(f"[e2e] {task} deferred: trigger {ti['trigger']}, pool {pool}")
                assert pool["deferred_slots"] >= 1 and pool["include_deferred"] is False, pool  # no slot held
                deferred[task] = ti
        run = airflow.json("GET", f"/api/v2/dags/elastic_rescale/dagRuns/{run_id}")
        if run["state"] in ("success", "failed"):
            assert produced, "the run ended before its lock was seen taken"
            for task, times in seen_deferred.items():
                if times:
                    print(f"[e2e] {task} seen deferred for {times[-1] - times[0]:.1f} s ({len(times)} polls)")
            return deferred
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not end within {timeout:.0f}s; deferred seen: {deferred}")
