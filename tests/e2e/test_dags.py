"""Every DAG under ``dag.test()``: real Airflow task execution (in this process), real Spark and Delta.

The DAGs' jobs run through spark-submit, as in production (a test's set-up run
goes on the session's Spark, ``_ran``); the control plane is the home in
``PIPELINES_HOME``, which each test points at its own folder.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.control import ControlPlane
from pipelines.control.decisions import read_decisions
from pipelines.control.locks import ScalingLock
from pipelines.core.groupers import plan_job_model
from pipelines.core.hashing import max_factor
from pipelines.core.limits import MAX_REASON
from pipelines.demo import producer
from pipelines.jobs.config import CONFIG_KEY, JobConfig
from pipelines.operations.jobs import create_job
from pipelines.runtime import launcher
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

REPO = Path(__file__).resolve().parents[2]
DAG_IDS = {
    "elastic_rescale",
    "repartition_watch",
    "scale_evaluation",
    "elastic_microbatch",
    "quality_report",
    "stream_maintenance",
}
QUIET = lambda message: None  # noqa: E731


@pytest.fixture
def dagbag(airflow_db: Any) -> Any:
    """Parsed afresh for every test: ``dag.test(run_conf=...)`` leaves a run's params on the in-memory DAG."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """This test's deployment, where the DAGs' tasks (running in this process) will look."""
    root = tmp_path / "home"
    monkeypatch.setenv("PIPELINES_HOME", str(root))
    monkeypatch.setenv("PIPELINES_SPARK_MASTER", "local[2]")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # spark-submit
    return Home(root)


def _demo_job(home: Home, name: str = "enrichment", *, trigger: str = "continuous", records: int = 300) -> JobConfig:
    log = DeltaLog(home.streams)
    if "events" not in log.list_streams():
        log.create("events", 2)
    producer.produce(log, home, "events", records, 20, seed=1)
    raw = JobConfig.load(REPO / "include/jobs/enrichment.yaml").to_dict()
    raw.update(
        name=name,
        trigger=trigger,
        process_options={"latency_ms": 0},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": 200, "trigger_interval": "0 seconds"},
    )
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    return config


def _ran(spark: Any, home: Home, config: JobConfig) -> None:
    """The job run to its inputs' end, as the DAG under test finds it: on the test session's Spark, in this process.

    Only the DAGs' own work goes through spark-submit here; a set-up run through it would cost a JVM's and a
    Spark application's start (about 10 s per test) to arrive at the same checkpoints and sink.
    """
    run_job(spark, home, config.name, available_now=True, progress=QUIET)
    assert ControlPlane(home).checkpoints.latest_batch(config.name, 1) is not None, "the set-up run read nothing"


def _run(dag: Any, **conf: Any) -> str:
    run = dag.test(run_conf=conf or None)
    return str(run.state)


def _note(dag_run: Any) -> str | None:
    """The run's note as Airflow's database has it now (``dag.test`` hands back a detached run)."""
    from airflow.models import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_run.dag_id, DagRun.run_id == dag_run.run_id))
        return None if run is None else run.note


def _task_states(dag_run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def test_the_dagbag_holds_every_dag_without_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAG_IDS
    undescribed = [d for d in DAG_IDS if not (dagbag.get_dag(d).description or "").strip()]
    assert undescribed == [], "the DAG list's description column is empty for these"
    rescale = dagbag.get_dag("elastic_rescale")
    assert {"job", "factor", "reason", "dry_run"} <= set(rescale.params.keys())
    assert rescale.max_active_runs == 1
    assert [t.task_id for t in rescale.tasks if t.is_teardown] == ["scale.record_event"]


def test_a_dry_run_shows_the_plan_and_changes_nothing(dagbag: Any, home: Home) -> None:
    _demo_job(home)
    run = dagbag.get_dag("elastic_rescale").test(run_conf={"job": "enrichment", "factor": 4, "dry_run": True})
    states = _task_states(run)
    assert str(run.state) == "success"
    assert states["plan"] == "success" and states["scale.migrate_checkpoints"] == "skipped"
    summary = next(ti for ti in run.get_task_instances() if ti.task_id == "plan").xcom_pull(task_ids="plan")
    assert (summary["to_factor"], summary["virtual_tasks"]) == (4, 8)
    control = ControlPlane(home)
    assert control.job_models.latest_version("enrichment") == 1 and control.events.history("enrichment") == []


def test_a_bad_factor_or_unknown_job_fails_validation_with_the_reason_as_the_note(
    dagbag: Any, home: Home, capfd: pytest.CaptureFixture[str]
) -> None:
    _demo_job(home)
    dag = dagbag.get_dag("elastic_rescale")
    cases = [
        ({"job": "enrichment", "factor": None}, "no factor given"),
        ({"job": "enrichment", "factor": 0}, "elasticity factor must be >= 1, got 0"),
        ({"job": "enrichment", "factor": max_factor() + 1}, f"{max_factor() + 1} is above the maximum {max_factor()}"),
        ({"job": "enrichment", "factor": "lots"}, "got 'lots'"),
        ({"job": "nope", "factor": 2}, "nope"),
        ({"job": "enrichment", "factor": 2, "spark_master": "bogus://x"}, "spark_master: Spark master 'bogus://x'"),
        ({"job": "enrichment", "factr": 8}, "unknown conf key 'factr': it takes auto, autosized, catch_up_timeout_s"),
        # stored with the new model whatever it held; with auto, refused before the autosizer records a decision
        ({"job": "enrichment", "factor": 2, "reason": "late\nnight"}, "reason holds a newline (U+000A) at character 5"),
        ({"job": "enrichment", "auto": True, "reason": "a\x00b"}, "reason holds a NUL (U+0000) at character 2"),
    ]
    for conf, reason in cases:
        run = dag.test(run_conf=conf)
        assert str(run.state) == "failed", conf
        states = _task_states(run)
        assert states["validate"] == "failed" and states["plan"] == "upstream_failed", conf
        note = _note(run)
        assert note is not None and reason in note and note.startswith("Refused by validate: "), note
        # the task's log says it in one line, as the CLI does, without the task runner's frames of a traceback
        log = "".join(capfd.readouterr())
        [said] = [line for line in log.splitlines() if line.startswith("error: ")]
        assert reason in said and "Traceback" not in log and "Task exited" in log, log[-3000:]
    assert ControlPlane(home).job_models.latest_version("enrichment") == 1 and read_decisions(home, "enrichment") == []


def test_a_reason_past_the_limit_is_refused_by_the_params_before_any_task_runs(dagbag: Any) -> None:
    """200,000 characters passed the Param and were kept in the run's conf: Airflow's trigger form and REST API now
    refuse what ``core.limits.check_reason`` would, by its length, at trigger time; the validate task checks the
    characters."""
    from airflow.sdk.definitions.param import ParamValidationError

    params = copy.deepcopy(dagbag.get_dag("elastic_rescale").params)
    assert params.get_param("reason").schema["maxLength"] == MAX_REASON
    with pytest.raises(ParamValidationError, match="Invalid input for param reason"):
        params["reason"] = "x" * (MAX_REASON + 1)
        params.validate()
    params["reason"] = "x" * MAX_REASON
    assert params.validate()["reason"] == "x" * MAX_REASON


def test_a_wait_past_ten_years_is_refused_by_the_params_before_any_task_runs(dagbag: Any) -> None:
    """``10**400`` passed the Params and overflowed ``float`` in the restart step, after the job was stopped."""
    from airflow.sdk.definitions.param import ParamValidationError

    for dag_id in ("elastic_rescale", "repartition_watch"):
        for name in ("lock_wait_s", "catch_up_timeout_s", "restart_timeout_s"):
            params = copy.deepcopy(dagbag.get_dag(dag_id).params)  # as a trigger's conf is merged into them
            with pytest.raises(ParamValidationError, match=f"Invalid input for param {name}"):
                params[name] = 10**400
                params.validate()
            params[name] = 3600
            assert params.validate()[name] == 3600


def test_a_factor_typed_as_text_runs_that_factor(dagbag: Any, home: Home) -> None:
    _demo_job(home)
    run = dagbag.get_dag("elastic_rescale").test(run_conf={"job": "enrichment", "factor": " 4 ", "dry_run": True})
    assert str(run.state) == "success", _task_states(run)
    summary = next(ti for ti in run.get_task_instances() if ti.task_id == "plan").xcom_pull(task_ids="plan")
    assert summary["to_factor"] == 4
    assert _note(run) == "Skipped by proceed: dry run: the plan of v2 (in the plan task's log) was not applied. " + (
        "Nothing was changed."
    )


def test_every_param_is_described_and_the_factor_is_kept_as_typed(dagbag: Any) -> None:
    for dag_id in sorted(dagbag.dag_ids):
        params = dagbag.get_dag(dag_id).params
        undescribed = [name for name in params if not (params.get_param(name).description or "").strip()]
        assert not undescribed, f"{dag_id}: {undescribed}"
    factor = dagbag.get_dag("elastic_rescale").params.get_param("factor")
    # no "type" and a text default: Airflow's form renders a text field that keeps what was typed (an integer Param
    # became a number field that clamped 0 to 1); any scalar passes the Param, the validate task checks the rest
    assert "type" not in factor.schema and factor.value == "2"
    assert [t["type"] for t in factor.schema["anyOf"]] == ["integer", "number", "string", "null"]
    assert f"1 to {max_factor()}" in (factor.description or "")


def test_auto_asks_the_autosizer_for_the_factor(dagbag: Any, home: Home) -> None:
    from pipelines.operations.autosize import evaluate

    _demo_job(home)
    expected = evaluate(home, "enrichment").factor  # no metrics yet: the autosizer's answer for a fresh job
    run = dagbag.get_dag("elastic_rescale").test(run_conf={"job": "enrichment", "auto": True, "dry_run": True})
    assert str(run.state) == "success", _task_states(run)
    summary = next(ti for ti in run.get_task_instances() if ti.task_id == "plan").xcom_pull(task_ids="plan")
    assert summary["to_factor"] == expected and "(auto: " in summary["reason"]


def test_rescale_recovers_from_a_crash_then_scales_verifies_and_records(
    dagbag: Any, home: Home, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _demo_job(home)
    _ran(spark, home, config)
    dag = dagbag.get_dag("elastic_rescale")
    control = ControlPlane(home)

    monkeypatch.setenv("PIPELINES_FAULT", "after_migrate")  # the migrate task crashes after saving v2
    crashed = dag.test(run_conf={"job": config.name, "factor": 4, "reason": "crash test"})
    monkeypatch.delenv("PIPELINES_FAULT")
    states = _task_states(crashed)
    assert str(crashed.state) == "failed"
    assert states["scale.migrate_checkpoints"] == "failed" and states["scale.record_event"] == "success"
    note = _note(crashed)  # what failed, and what to do, where the operator looks
    assert note is not None and note.startswith("Failed at scale.migrate_checkpoints: InjectedFault: "), note
    assert note.endswith("fix the cause named here, then trigger the run again."), note
    assert control.job_models.active_version(config.name) == 1  # the old model stays fully in force
    assert control.events.history(config.name)[-1].status == "rolled back"
    assert ScalingLock(home).state(config.name).status == "released"

    producer.produce(DeltaLog(home.streams), home, "events", 200, 20, seed=2)
    run = dag.test(run_conf={"job": config.name, "factor": 4, "reason": "scale up"})
    assert str(run.state) == "success", _task_states(run)
    model = control.job_models.active(config.name)
    assert (model.version, model.elasticity_factor, model.task_count) == (3, 4, 8)  # v2 stays inert
    event = control.events.history(config.name)[-1]
    assert event.status == "verified"
    assert event.details["dq"] == "pass" and event.details["records_replayed"] == 0
    assert event.details["mode"] == "cold" and event.details["caught_up_s"] >= 0
    # the page that follows the run: its tasks in the DAG's order with what each took, and the event's outcome
    from pipelines_airflow.rescale import run_state

    followed = run_state("elastic_rescale", run.run_id)
    assert followed is not None and followed["finished"]
    order = [t["task"] for t in followed["tasks"]]
    assert order[:3] == ["validate", "plan", "proceed"] and order[-1] == "scale.record_event", order
    assert order.index("scale.activate_model") < order.index("scale.restart_job") < order.index("scale.verify_quality")
    assert all(t["duration_s"] is not None and t["duration_s"] >= 0 for t in followed["tasks"]), followed["tasks"]
    result = followed["result"]
    assert (result["status"], result["to_factor"], result["to_version"], result["dq"]) == ("verified", 4, 3, "pass")
    dq = control.dq_results.read(config.name)
    window = dq[dq["window"] == f"event:{event.event_id}"]
    assert set(window["check"]) >= {"no_loss", "no_duplicates", "key_order"}
    # the verify task recorded its DAG run and each check's Data Docs page with the verdict
    assert set(zip(window["dag_id"], window["run_id"], strict=True)) == {("elastic_rescale", run.run_id)}
    assert all((home.root.local_path() / "quality" / "docs" / page).is_file() for page in window["docs_page"])


def test_an_autosized_rescale_waits_deferred_for_the_lock_then_is_asked_again_and_skipped_with_a_note(
    dagbag: Any, home: Home
) -> None:
    """The collision of the issue: the autosizer's rescale meets another step holding the lock. It waits on the
    triggerer, finds v2 active, asks the autosizer again, which holds (nothing to go on yet): skipped, with why."""
    from pipelines import planning
    from tests.integration.operations.test_queueing import went_first

    config = _demo_job(home)
    to_two = planning.plan_next(home, config.name, factor=2)  # the step that went first: a factor-2 v2
    first = went_first(home, config.name, "airflow:repartition_watch:went_first", to_two, hold_s=3.0)
    try:
        run = dagbag.get_dag("elastic_rescale").test(
            run_conf={"job": config.name, "factor": 4, "reason": "autosize up", "decided_on": 1, "autosized": True}
        )
    finally:
        first.join()
    states = _task_states(run)
    assert str(run.state) == "success", states
    assert states["scale.begin"] == "skipped" and states["scale.record_event"] == "skipped", states
    note = _note(run)
    assert note is not None and note.startswith(
        f"Skipped by scale.begin: the rescale of {config.name} was decided on v1; v2 is active now, and the "
        "autosizer asked again says hold: "
    ), note
    assert note.endswith("factor 4 was not applied. Nothing was changed."), note
    control = ControlPlane(home)
    assert control.job_models.active(config.name).elasticity_factor == 2  # the step that went first stands
    assert control.events.history(config.name) == [] and ScalingLock(home).state(config.name).status == "released"


def test_a_rescale_that_waits_past_lock_wait_s_ends_skipped_naming_the_holder(dagbag: Any, home: Home) -> None:
    config = _demo_job(home)
    ScalingLock(home).acquire(config.name, "airflow:repartition_watch:slow", "a long absorption")
    run = dagbag.get_dag("elastic_rescale").test(run_conf={"job": config.name, "factor": 4, "lock_wait_s": 1})
    states = _task_states(run)
    assert str(run.state) == "success" and states["scale.begin"] == "skipped", states
    note = _note(run)
    assert note is not None and note.startswith("Skipped by scale.begin: waited "), note
    assert "airflow:repartition_watch:slow holds it for 'a long absorption'" in note, note
    assert ControlPlane(home).job_models.latest_version(config.name) == 1


def test_repartition_watch_absorbs_an_expansion_with_keys_kept_on_their_tasks(
    dagbag: Any, home: Home, spark: Any
) -> None:
    config = _demo_job(home)
    _ran(spark, home, config)
    log = DeltaLog(home.streams)
    producer.produce(log, home, "events", 100, 20, seed=3)  # unread records in the old partitions ...
    log.expand("events", 4)
    producer.produce(log, home, "events", 200, 20, seed=4)  # ... and newer ones of the same keys in new ones
    run = dagbag.get_dag("repartition_watch").test()
    assert str(run.state) == "success", _task_states(run)
    model = ControlPlane(home).job_models.active(config.name)
    assert model.grouper == "GroupByPartitionFixedTaskNum"
    assert sorted(model.partitions().values()) == [4]
    assert model.task_count == 2  # SEP-5: partitions 2 and 3 joined the tasks of partitions 0 and 1
    event = ControlPlane(home).events.history(config.name)[-1]
    assert (event.kind, event.status, event.details["dq"]) == ("partition expansion", "verified", "pass")
    again = dagbag.get_dag("repartition_watch").test()  # nothing left to absorb
    assert str(again.state) == "success" and ControlPlane(home).job_models.active_version(config.name) == model.version


def test_repartition_watch_fails_on_a_change_it_cannot_absorb_and_keeps_the_model(dagbag: Any, home: Home) -> None:
    """A topic that grew from 3 to 4 partitions (Kafka allows it; SEP-5 cannot keep keys on their tasks)."""
    log = DeltaLog(home.streams)
    log.create("events", 4)
    raw = JobConfig.load(REPO / "include/jobs/enrichment.yaml").to_dict()
    config = JobConfig.from_dict({**raw, "grouper": "GroupByPartitionFixedTaskNum"})
    create_job(home, config)
    control = ControlPlane(home)
    v1 = control.job_models.active(config.name)
    three = plan_job_model(
        config.name, 2, {config.inputs[0]: 3}, grouper=config.grouper, config={CONFIG_KEY: v1.config[CONFIG_KEY]}
    )
    control.job_models.save(three, reason="the job was planned when the topic had 3 partitions")
    control.job_models.activate(config.name, 2)
    run = dagbag.get_dag("repartition_watch").test()
    states = _task_states(run)
    assert str(run.state) == "failed"
    assert states["refuse_invalid"] == "failed"
    note = _note(run)
    assert note is not None and note.startswith(f"Refused by refuse_invalid: {config.name}: "), note
    assert note.endswith(". Nothing was changed."), note
    assert control.job_models.active_version(config.name) == 2 and control.job_models.latest_version(config.name) == 2


def test_scale_evaluation_records_its_decision_and_triggers_a_rescale(dagbag: Any, home: Home) -> None:
    from pipelines.control.decisions import read_decisions
    from tests.integration.operations.test_autosize import JOB, Load, make_job, write_batches

    make_job(home, 1)
    # ten batches, 2 s apart, ending now: tasks busy 95% of the time and the lag growing by 500 records a batch
    start = _utc_now() - _seconds(2.0 * 10)
    write_batches(home, [Load(process_s=1.9, records=100, lag=1000 + 500 * i) for i in range(10)], start=start)
    run = dagbag.get_dag("scale_evaluation").test()
    assert str(run.state) == "success", _task_states(run)
    decision = read_decisions(home, JOB)[-1]
    assert (decision["action"], decision["target_factor"]) == ("up", 2)
    from airflow.models import DagRun
    from pipelines_airflow import autosize_runs
    from pipelines_airflow.collect import decisions

    triggered = [r for r in DagRun.find(dag_id="elastic_rescale") if r.conf and r.conf.get("job") == JOB]
    assert triggered and triggered[-1].conf["factor"] == 2 and triggered[-1].conf["reason"].startswith("autosize up")
    # the rescale carries the model it was decided on (asked again if another is active by its turn) ...
    assert (triggered[-1].conf["decided_on"], triggered[-1].conf["autosized"]) == (1, True)
    # ... and is named after its decision, so the page finds it from the decision's row
    assert triggered[-1].run_id == autosize_runs.run_id(JOB, decision["decided_at"])
    [shown] = decisions(home, JOB)
    assert (shown["run_id"], shown["outcome"]) == (triggered[-1].run_id, "queued"), shown  # dag.test runs no more


def test_microbatch_runs_available_now_jobs_and_relaunches_a_continuous_one(dagbag: Any, home: Home) -> None:
    batch = _demo_job(home, "nightly", trigger="available-now")
    continuous = _demo_job(home, "always", trigger="continuous", records=0)
    try:
        run = dagbag.get_dag("elastic_microbatch").test()
        assert str(run.state) == "success", _task_states(run)
        rows = ControlPlane(home).checkpoints.latest(batch.name, 1)
        ends = DeltaLog(home.streams).end_offsets("events")
        assert {s.partition: int(o) for s, o in rows.offsets.items()} == ends  # every record of the input read
        from pipelines.operations.scaling.readings import last_heartbeat

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (last_heartbeat(ControlPlane(home), continuous.name) or {}).get(
            "live"
        ):
            time.sleep(1)
        assert (last_heartbeat(ControlPlane(home), continuous.name) or {}).get("live"), "relaunched driver never beat"
    finally:
        assert launcher.stop(home, continuous.name, timeout=120)


def test_quality_report_validates_every_job_and_publishes_data_docs(
    dagbag: Any, home: Home, spark: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _demo_job(home)
    _ran(spark, home, config)
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://127.0.0.1:18080")  # what scripts/airflow.sh sets
    run = dagbag.get_dag("quality_report").test()
    assert str(run.state) == "success", _task_states(run)
    assert "Data Docs: http://127.0.0.1:18080/elastic-pipelines/docs/index.html" in capsys.readouterr().out
    dq = ControlPlane(home).dq_results.read(config.name)
    assert len(dq) and dq["success"].all()
    assert (home.root.local_path() / "quality" / "docs" / "index.html").exists()


def test_stream_maintenance_trims_and_compacts_every_stream_but_never_takes_what_a_job_has_not_read(
    dagbag: Any, home: Home
) -> None:
    from pipelines.core.segments import RETAIN_FOREVER
    from tests.integration.runtime.jobs import job

    log = DeltaLog(home.streams)
    for name in ("events", "clicks", "views", "audit"):
        log.create(name, 2)
        for commit in range(3):  # three files per partition
            log.produce(name, [(f"k{commit}-{i}".encode(), b"v", None) for i in range(20)])
    log.set_retention("clicks", 1)  # its own retention, 1 ms, wins over the DAG's older_than
    log.set_retention("audit", RETAIN_FOREVER)  # kept whatever the DAG's older_than
    job(home, "reader", 1)  # reads events, has read nothing yet
    ends = log.end_offsets("clicks")

    def earliest(stream: str) -> dict[int, int]:
        return {p: int(m.earliest) for p, m in log.describe(stream).partitions.items()}

    time.sleep(0.02)
    dag = dagbag.get_dag("stream_maintenance")
    assert dag.is_paused_upon_creation is True, "deleting data waits for the operator to unpause it"
    assert _run(dag, older_than="0s") == "failed", "a bad age fails before any stream is touched"
    assert _run(dag, older_than="30d", compact=False) == "success"  # merged files would leave the next run nothing
    kept = earliest("clicks")
    assert all(0 < kept[p] < ends[p] for p in ends), "every file but the last of each partition went"
    assert earliest("views") == {0: 0, 1: 0}, "a stream without its own retention gets the DAG's 30 days"
    assert _run(dag, older_than="1ms", compact=True) == "success"  # (a run's conf stays on the in-memory DAG)
    assert all(n > 0 for n in earliest("views").values()), "and the DAG's 1 ms on the next run"
    assert earliest("audit") == {0: 0, 1: 0}, "retention forever: never trimmed on a schedule"
    assert earliest("events") == {0: 0, 1: 0}
    files = Counter(
        pa.table(DeltaTable(log.path("events")).get_add_actions(flatten=True))["partition.partition"].to_pylist()
    )
    assert sorted(files.values()) == [1, 1], "the three files of each partition it kept were merged into one"
    assert _run(dag, older_than="1ms", streams=["nope"]) == "failed", "a stream that does not exist is named"
    refused = dag.test(run_conf={"older_than": "1ms", "streams": ["views", "../x"]})
    states = _task_states(refused)  # refused as a whole by the first task, not by "../x"'s after "views" was trimmed
    assert str(refused.state) == "failed" and states["streams"] == "failed", states
    assert states.get("maintain") in (None, "upstream_failed"), states


def _utc_now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def _seconds(s: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=s)
