"""The scaling path on real Spark and Delta: figures recorded, crashes recovered, one operation at a time."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingInProgressError, ScalingLock, process_owner
from pipelines.core.metric_names import SWITCH_PHASES
from pipelines.deltaio import read_delta
from pipelines.demo import producer
from pipelines.errors import ConfigError, UnknownJobError
from pipelines.faults import FAULT_ENV, InjectedFault
from pipelines.operations import scaling
from pipelines.operations.scaling.operation import ScalingRequest
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.integration.runtime.jobs import job, order_violations, sink

QUIET = lambda message: None  # noqa: E731


def produce(home: Home, stream: str, records: int, keys: int) -> None:
    """Keyed events whose per-key ``seq`` continues across calls (what the order checks follow)."""
    log = DeltaLog(home.streams)
    if stream not in log.list_streams():
        log.create(stream, 2)
    producer.produce(log, home, stream, records, keys, seed=None)


def _catch_up(spark: Any):
    return lambda home, name: run_job(spark, home, name, available_now=True, progress=QUIET)


@pytest.fixture
def ran_once(spark: Any, home: Home) -> str:
    """A factor-1 job over 2 partitions that has processed 400 records."""
    produce(home, "events", 400, keys=30)
    config = job(home, "elastic", 1, max_records=200)
    run_job(spark, home, config.name, available_now=True, progress=QUIET)
    return config.name


def test_rescale_without_a_driver_catches_up_verifies_and_records_its_figures(
    spark: Any, home: Home, ran_once: str
) -> None:
    produce(home, "events", 200, keys=30)  # a backlog the new model must process
    result = scaling.run_all(
        home, ScalingRequest(ran_once, 4, "test scale up"), catch_up=_catch_up(spark), sequence="seq", say=QUIET
    )
    assert result["status"] == "verified"
    assert result["dq"] == "pass"
    assert result["records_replayed"] == 0
    assert result["downtime_s"] is None  # nothing was running, so nothing was down
    control = ControlPlane(home)
    model = control.job_models.active(ran_once)
    assert (model.version, model.elasticity_factor, model.task_count) == (2, 4, 8)
    event = control.events.history(ran_once)[-1]
    assert (event.status, event.from_version, event.to_version) == ("verified", 1, 2)
    assert event.details["records_replayed"] == 0 and event.details["mode"] == "cold"
    assert ScalingLock(home).state(ran_once).status == "released"
    assert verify_job(home, ran_once, sequence="seq").ok


def test_rescale_of_a_stopped_job_at_the_inputs_end_starts_no_run_and_the_next_run_goes_on_from_there(
    spark: Any, home: Home, ran_once: str
) -> None:
    runs: list[str] = []
    result = scaling.run_all(
        home, ScalingRequest(ran_once, 4, "test"), catch_up=lambda h, name: runs.append(name), say=QUIET
    )
    assert runs == [], "nothing was left to catch up, so no Spark run was started"
    assert (result["status"], result["dq"]) == ("verified", "pass")
    produce(home, "events", 200, keys=30)
    run_job(spark, home, ran_once, available_now=True, progress=QUIET)
    rows = read_delta(home.sinks / f"{ran_once}_out").to_pandas()
    assert len(rows) == 600 and not rows.duplicated(["partition", "offset"]).any()
    assert (rows["model_version"] == 2).sum() == 200, "v2 read on from where v1 stopped"
    assert order_violations(rows) == []


def test_rescale_of_a_stopped_job_whose_inputs_cannot_be_looked_at_gets_its_catch_up_run_and_waits_for_it(
    spark: Any, home: Home, ran_once: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipping the catch-up run is a saving, and a look during the wait is one of many: a failed look at the
    inputs (a broker down) ended the rescale at either."""
    from pipelines.errors import StreamError
    from pipelines.operations.scaling import switch

    looks: list[Any] = []
    look = switch.catch_up_state

    def broker_down_twice(*args: Any) -> Any:  # the look before the run, then the wait's first look, fail
        looks.append(args)
        if len(looks) <= 2:
            raise StreamError("stream 'events': the broker did not answer")
        return look(*args)

    monkeypatch.setattr(switch, "catch_up_state", broker_down_twice)
    runs: list[str] = []
    said: list[str] = []
    result = scaling.run_all(
        home, ScalingRequest(ran_once, 4, "test"), catch_up=lambda h, name: runs.append(name), say=said.append
    )
    assert runs == [ran_once], "the run the look would have spared is started"
    assert any("could not tell" in line and "the broker did not answer" in line for line in said), said
    assert any("cannot be looked at" in line for line in said), "the wait missed a look, and waited on"
    assert any("can be looked at again" in line for line in said), said
    assert (result["status"], result["dq"]) == ("verified", "pass")


def test_a_catch_up_wait_whose_every_look_fails_times_out_naming_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from pipelines.errors import PipelinesError, StreamError
    from pipelines.operations.scaling import switch

    def broker_down(*args: Any) -> Any:
        raise StreamError("stream 'events': the broker did not answer")

    monkeypatch.setattr(switch, "begin_catch_up", lambda home, op: (2, {"deltalog/events": {"0": 5}}))
    monkeypatch.setattr(switch, "catch_up_state", broker_down)
    monkeypatch.setattr(switch, "CATCH_UP_POLL_S", 0.05)
    said: list[str] = []
    op: Any = SimpleNamespace(job="elastic")
    with pytest.raises(PipelinesError, match=r"after 0s.*its last looks failed: stream 'events': the broker") as out:
        switch.wait_caught_up(Home(tmp_path / "home"), op, timeout_s=0.3, say=said.append)
    assert "an unknown number of records behind" in str(out.value)
    assert len(said) == 1 and "cannot be looked at" in said[0], "said once, not at every missed look"


def test_a_dry_plan_validates_and_writes_nothing(home: Home, ran_once: str) -> None:
    control = ControlPlane(home)
    summary = scaling.plan(home, ScalingRequest(ran_once, 8, "look"))
    assert (summary["from_factor"], summary["to_factor"], summary["virtual_tasks"], summary["changes"]) == (
        1,
        8,
        16,
        True,
    )
    assert not scaling.plan(home, ScalingRequest(ran_once, 1, "same"))["changes"]
    with pytest.raises(ConfigError, match="elasticity factor"):
        scaling.plan(home, ScalingRequest(ran_once, 0, "bad"))
    with pytest.raises(UnknownJobError, match="known jobs: elastic"):
        scaling.plan(home, ScalingRequest("nope", 2, "bad"))
    assert control.job_models.latest_version(ran_once) == 1 and control.events.history(ran_once) == []


def _crash_after_migration(
    home: Home, job_name: str, owner: str, monkeypatch: pytest.MonkeyPatch, ttl: float
) -> scaling.ScalingOperation:
    op = scaling.begin(home, ScalingRequest(job_name, 4, "crashes"), owner, ttl_s=ttl, say=QUIET)
    scaling.stop(home, op, QUIET)
    monkeypatch.setenv(FAULT_ENV, "after_migrate")
    with pytest.raises(InjectedFault):
        scaling.migrate(home, op, QUIET)
    monkeypatch.delenv(FAULT_ENV)
    return op  # no finish: the process "died", its lock and its event are left as they were


def test_a_crash_between_migration_and_activation_is_rolled_back_by_the_next_run(
    spark: Any, home: Home, ran_once: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = ControlPlane(home)
    before = control.checkpoints.latest(ran_once, 1)
    crashed = _crash_after_migration(home, ran_once, "run-1", monkeypatch, ttl=1.0)
    assert control.job_models.active_version(ran_once) == 1  # model 1 fully in force: its checkpoints untouched
    assert control.checkpoints.latest(ran_once, 1) == before
    assert control.job_models.latest_version(ran_once) == 2  # v2 saved with start checkpoints, never activated
    with pytest.raises(ScalingInProgressError, match="run-1 holds it"):
        scaling.begin(home, ScalingRequest(ran_once, 4, "too early"), "run-2", say=QUIET)
    time.sleep(1.2)  # the crashed run's lease expires
    produce(home, "events", 100, keys=30)
    result = scaling.run_all(
        home, ScalingRequest(ran_once, 4, "after the crash"), owner="run-2", catch_up=_catch_up(spark), say=QUIET
    )
    assert result["status"] == "verified"
    events = {e.event_id: e for e in control.events.history(ran_once)}
    assert events[crashed.event_id].status == "rolled back"
    assert events[crashed.event_id].details["settled_by"] == "run-2"
    assert control.job_models.active_version(ran_once) == 3  # v2 stays an inert planned row
    rows = sink(home, job_config_of(home, ran_once))
    assert len(rows) == 500 and not rows.duplicated(["partition", "offset"]).any()
    assert order_violations(rows) == []


def test_a_retry_of_the_crashed_run_resumes_its_own_operation(
    spark: Any, home: Home, ran_once: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed = _crash_after_migration(home, ran_once, "run-1", monkeypatch, ttl=600)
    result = scaling.run_all(
        home, ScalingRequest(ran_once, 4, "retry"), owner="run-1", catch_up=_catch_up(spark), say=QUIET
    )
    assert result["event_id"] == crashed.event_id
    assert result["status"] == "verified"
    control = ControlPlane(home)
    # no second N+1
    assert control.job_models.active_version(ran_once) == 2 and control.job_models.latest_version(ran_once) == 2


def test_two_operations_started_together_one_is_refused_and_nothing_is_written_for_it(
    home: Home, ran_once: str
) -> None:
    barrier = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def start(owner: str, factor: int) -> None:
        barrier.wait()
        try:
            outcomes[owner] = scaling.begin(home, ScalingRequest(ran_once, factor, owner), owner, say=QUIET)
        except ScalingInProgressError as e:
            outcomes[owner] = e

    threads = [threading.Thread(target=start, args=(o, f)) for o, f in (("a", 2), ("b", 8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    refused = [o for o, r in outcomes.items() if isinstance(r, ScalingInProgressError)]
    assert len(refused) == 1, outcomes
    winner = "a" if refused == ["b"] else "b"
    events = ControlPlane(home).events.history(ran_once)
    assert [e.details["owner"] for e in events] == [winner]
    assert ScalingLock(home).state(ran_once).owner == winner


def test_a_live_driver_switches_in_place_with_a_short_measured_downtime(spark: Any, home: Home, ran_once: str) -> None:
    """The driver keeps running; the rescale activates v2 and the driver restarts its query in the same app."""
    stop_producing = threading.Event()
    failures: list[BaseException] = []

    def producer() -> None:
        while not stop_producing.is_set():
            produce(home, "events", 40, keys=30)
            time.sleep(0.3)

    def driver() -> None:
        try:
            run_job(spark, home, ran_once, available_now=False, progress=QUIET, max_seconds=300)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=producer), threading.Thread(target=driver)]
    for t in threads:
        t.start()
    try:
        _wait_for(lambda: (scaling.last_heartbeat(ControlPlane(home), ran_once) or {}).get("live"))
        committed = ControlPlane(home).checkpoints.latest_batch(ran_once, 1)
        _wait_for(lambda: ControlPlane(home).checkpoints.latest_batch(ran_once, 1) > committed)  # it is processing
        result = scaling.run_all(home, ScalingRequest(ran_once, 4, "live"), catch_up_timeout_s=180, say=QUIET)
    finally:
        stop_producing.set()
        threads[0].join(30)
        time.sleep(3)  # let the driver take the last records in
        requests.ask_stop(home, ran_once)
        threads[1].join(120)
    assert not failures, failures
    assert result["status"] == "verified", result
    assert ControlPlane(home).events.history(ran_once)[-1].details["mode"] == "in-place"
    assert result["records_replayed"] == 0
    assert 0 < result["downtime_s"] < 30, result  # one batch boundary plus a query start; reported, not timed
    print(f"in-place switch downtime: {result['downtime_s']:.2f}s")
    # where it went: the driver's phases of the switch into v2, written once v2's first batch with data reported
    frame = ControlPlane(home).metrics.read(ran_once, model_version=2, metrics=list(SWITCH_PHASES))
    phases = dict(zip(frame["metric"], frame["value"], strict=True))
    assert set(phases) == set(SWITCH_PHASES), phases
    assert phases["switch.downtime_s"] == pytest.approx(result["downtime_s"], abs=0.01)
    assert phases["switch.started_ahead"] == 1.0, "v2's query started behind its gate while v1 finished"
    assert min(phases["switch.carry_s"], phases["switch.start_s"], phases["switch.plan_s"]) >= 0, phases
    before_the_batch = sum(phases[f"switch.{p}_s"] for p in ("carry", "start", "first_trigger", "plan", "offset_log"))
    assert before_the_batch <= phases["switch.downtime_s"] + 0.05, phases  # the parts fit in the whole
    run_job(spark, home, ran_once, available_now=True, progress=QUIET)
    assert verify_job(home, ran_once, sequence="seq").ok


def _wait_for(condition: Any, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if condition():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise AssertionError("condition not met in time")


def job_config_of(home: Home, name: str) -> Any:
    from pipelines.jobs.config import job_config

    return job_config(ControlPlane(home).job_models.active(name))


def test_a_request_refused_after_the_lock_was_taken_lets_the_lock_go(home: Home) -> None:
    produce(home, "events", 50, keys=5)
    config = job(home, "refused", 1)
    bad = ScalingRequest(config.name, 2, "cannot", grouper="AllSspToSingleTask")  # refuses a factor above 1
    with pytest.raises(ConfigError, match="cannot be elastic"):
        scaling.begin(home, bad, "run-1", say=QUIET)
    assert ScalingLock(home).state(config.name).status == "released"
    assert ControlPlane(home).events.history(config.name) == []
    op = scaling.begin(home, ScalingRequest(config.name, 2, "fine"), "run-2", say=QUIET)  # nobody is blocked
    assert op.to_factor == 2


def test_what_a_killed_cli_left_is_settled_by_a_request_that_finds_nothing_to_change(home: Home) -> None:
    """Killed after activating: the repeated request has nothing to do, and still frees the job."""
    produce(home, "events", 40, keys=5)
    name = job(home, "killed_cli", 1).name
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"cli:{socket.gethostname()}:{int(gone.stdout)}:deadbeef"
    op = scaling.begin(home, ScalingRequest(name, 2, "killed later"), dead, say=QUIET)
    scaling.migrate(home, op, say=QUIET)
    scaling.activate(home, op, say=QUIET)  # ... and the process dies here

    assert not scaling.plan(home, ScalingRequest(name, 2, "again"))["changes"], "v2 is in force: nothing to change"
    settled = scaling.settle_abandoned(home, name, say=QUIET)
    assert settled == [op.event_id]
    [event] = ControlPlane(home).events.history(name)
    assert event.status == "recovered" and event.finished_at is not None
    state = ScalingLock(home).state(name)
    assert state is not None and not state.held
    assert scaling.settle_abandoned(home, name, say=QUIET) == [], "nothing is left to settle"


def test_a_live_holder_is_never_settled(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    name = job(home, "busy_cli", 1).name
    live = process_owner("cli")  # this test's own process
    scaling.begin(home, ScalingRequest(name, 2, "still running"), live, say=QUIET)
    assert scaling.settle_abandoned(home, name, say=QUIET) == []
    state = ScalingLock(home).state(name)
    assert state is not None and state.held and state.owner == live


def _remote_driver(home: Home, job_name: str, host: str, pid: int) -> Any:
    """A driver registered as another host's: its rows name that host, and a pid that means something only there."""
    from pipelines.control.drivers import Registration

    registration = Registration(home, job_name)
    registration.identity.update(host=host, pid=pid)
    registration.start()
    registration.beat(1, 2)
    return registration


def test_the_stop_step_takes_a_live_remote_driver_for_in_place_and_a_silent_one_for_dead_never_signalling_it(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines.control import drivers

    produce(home, "events", 40, keys=5)
    name = job(home, "remote_driver", 1).name
    # the same number as a process of this host: signalled by mistake, it would die
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        _remote_driver(home, name, "driver-host-b", bystander.pid)
        op = scaling.begin(home, ScalingRequest(name, 2, "remote"), "run-remote", say=QUIET)
        said: list[str] = []
        assert scaling.stop(home, op, say=said.append)["mode"] == "in-place"
        assert any("live on v1 on driver-host-b" in s for s in said), said

        monkeypatch.setattr(drivers, "STALE_AFTER_S", 1.0)  # its beats stop: silent after 1 s of the store's time
        deadline = time.monotonic() + 20
        while (scaling.last_heartbeat(ControlPlane(home), name) or {}).get("live"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        said.clear()
        assert scaling.stop(home, op, say=said.append)["mode"] == "cold"
        assert any(f"pid {bystander.pid} on host driver-host-b, went silent" in s for s in said), said
        assert bystander.poll() is None, "another host's pid was never signalled"
    finally:
        bystander.kill()
        bystander.wait()
