"""The scaling path's trigger, run as the triggerer runs it (an asyncio task on a shared event loop).

The control plane is a real home with a real job. A driver's rows (its heartbeat, the start of a query on a
model, a batch's checkpoints) are written through the control plane's own API, as the driver writes them, at
chosen moments: what is tested is what the trigger makes of them, and that its looks never run on the loop.
The whole wait through a real triggerer is in ``test_rest_rescale``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pipelines_airflow.triggers import (
    CATCH_UP,
    CAUGHT_UP,
    DRIVER_GONE,
    SWITCH,
    SWITCHED,
    TIMED_OUT,
    ScalingWaitTrigger,
)

from pipelines.control import ControlPlane
from pipelines.control.drivers import Registration
from pipelines.control.metrics import metric
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.ssp import SystemStreamPartition
from pipelines.demo import producer
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.operations.scaling.readings import end_positions
from pipelines.storage.clock import StoreClock, boot_clock
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

REPO = Path(__file__).resolve().parents[2]
JOB = "triggered"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    log = DeltaLog(home.streams)
    log.create("events", 2)
    producer.produce(log, home, "events", 120, 10, seed=1)
    raw = JobConfig.load(REPO / "include/jobs/enrichment.yaml").to_dict()
    raw.update(name=JOB, sink={"table": f"{JOB}_out"}, dead_letter={"table": f"{JOB}_dead"})
    create_job(home, JobConfig.from_dict(raw))
    return home


class Recorded(ScalingWaitTrigger):
    """The trigger under test, recording on which thread each blocking look ran."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.look_threads: list[int] = []

    def _look(self) -> tuple[str | None, int | None]:
        self.look_threads.append(threading.get_ident())
        return super()._look()


async def _run(trigger: Any, *, meanwhile: Any = None) -> dict[str, Any]:
    """The trigger's first event, as the triggerer takes it: the trigger as one task of the loop, beside others."""
    loop_thread = threading.get_ident()
    side = asyncio.create_task(meanwhile()) if meanwhile is not None else None
    try:
        event = await asyncio.wait_for(anext(trigger.run()), timeout=120)
    finally:
        if side is not None:
            await side
    # Every blocking look ran in a thread of its own: the loop, which the triggerer shares between all its triggers,
    # never waited on one. (Looks take 10-50 ms here, as long as a loop's ordinary gaps: a timing check could not
    # tell the difference, the thread can.)
    assert trigger.look_threads and loop_thread not in trigger.look_threads
    return event.payload


def _beat(home: Home, version: int, *, age_s: float = 0.0) -> None:
    """A driver registered in the ``drivers`` table, its last beat ``age_s`` old by the store's clock: the
    registration stamps its rows with a clock that far behind the store's (what a driver killed then left)."""
    clock = StoreClock(lambda: (boot_clock(), time.time() - age_s, boot_clock())) if age_s else None
    registration = Registration(home, JOB, clock=clock)
    registration.start()
    registration.beat(model_version=version)


def test_the_trigger_rebuilds_itself_from_what_it_serializes(home: Home) -> None:
    trigger = ScalingWaitTrigger(
        home=str(home.root), job=JOB, version=2, wait=CATCH_UP, timeout_s=600, target={"deltalog/events": {"0": "7"}}
    )
    path, kwargs = trigger.serialize()
    assert path == "pipelines_airflow.triggers.ScalingWaitTrigger"
    module, name = path.rsplit(".", 1)
    again = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert again.serialize() == (path, kwargs)
    with pytest.raises(ValueError, match="unknown wait"):
        ScalingWaitTrigger(home=str(home.root), job=JOB, version=2, wait="nap", timeout_s=1)


def test_the_switch_fires_once_the_live_driver_starts_the_new_model(home: Home) -> None:
    _beat(home, 1)  # a live driver on v1
    trigger = Recorded(home=str(home.root), job=JOB, version=2, wait=SWITCH, timeout_s=60, poll_s=0.2)
    started = time.monotonic()

    async def driver_switches() -> None:
        await asyncio.sleep(1.5)
        rows = [metric(JOB, 2, -1, None, "query_started", time.time())]
        await asyncio.to_thread(ControlPlane(home).metrics.append, rows)

    event = asyncio.run(_run(trigger, meanwhile=driver_switches))
    assert event["status"] == SWITCHED, event
    assert event["looks"] >= 2 and time.monotonic() - started >= 1.5  # it waited for the switch, looking again


def test_a_driver_whose_heartbeat_went_stale_is_reported_gone_at_once(home: Home) -> None:
    _beat(home, 1, age_s=120)  # killed two minutes ago, before it switched
    trigger = Recorded(home=str(home.root), job=JOB, version=2, wait=SWITCH, timeout_s=60, poll_s=0.2)
    event = asyncio.run(_run(trigger))
    assert (event["status"], event["looks"]) == (DRIVER_GONE, 1), event


def test_the_catch_up_times_out_with_the_records_left_then_fires_once_the_checkpoints_reach_the_target(
    home: Home,
) -> None:
    target = end_positions(home, JOB)  # the activation point: every record produced so far
    assert sum(int(end) for end in target["deltalog/events"].values()) == 120
    late = Recorded(home=str(home.root), job=JOB, version=1, wait=CATCH_UP, target=target, timeout_s=1, poll_s=0.2)
    event = asyncio.run(_run(late))
    assert (event["status"], event["behind"]) == (TIMED_OUT, 120), event
    assert event["looks"] >= 2 and event["waited_s"] >= 1

    trigger = Recorded(home=str(home.root), job=JOB, version=1, wait=CATCH_UP, target=target, timeout_s=60, poll_s=0.2)

    async def batch_commits() -> None:
        await asyncio.sleep(1.0)
        ends = {
            SystemStreamPartition("deltalog", "events", int(p)): end for p, end in target["deltalog/events"].items()
        }
        await asyncio.to_thread(ControlPlane(home).checkpoints.write, JOB, 1, CheckpointMap(1, ends), 0)

    event = asyncio.run(_run(trigger, meanwhile=batch_commits))
    assert (event["status"], event["behind"]) == (CAUGHT_UP, 0), event
    assert event["looks"] >= 2


def test_a_look_that_fails_is_retried_and_named_if_time_runs_out(tmp_path: Path) -> None:
    nowhere = tmp_path / "not-a-home"  # no control plane at all: every look at a catch-up fails
    trigger = Recorded(home=str(nowhere), job=JOB, version=2, wait=CATCH_UP, target={}, timeout_s=1, poll_s=0.2)
    event = asyncio.run(_run(trigger))
    assert event["status"] == TIMED_OUT and event["looks"] >= 2, event
    assert event["error"] and JOB in event["error"], event


def test_a_catch_up_waits_first_look_that_meets_an_outage_defers_to_the_trigger_and_a_bug_still_fails(
    home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The task's own look before it defers: an input or store that does not answer is one failed look, which
    the trigger repeats (as it does every failed look), not a failed task waiting on Airflow's retries."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import TaskDeferred
    from pipelines_airflow import scaling as tasks

    from pipelines.errors import StreamError
    from pipelines.operations import scaling

    target = {"deltalog:events": {"0": "5", "1": "7"}}
    monkeypatch.setattr(tasks, "_home", lambda: home)
    monkeypatch.setattr(tasks, "_op", lambda op: SimpleNamespace(job=JOB))
    monkeypatch.setattr(tasks, "_param", lambda name, default=None: default)
    monkeypatch.setattr(scaling, "begin_catch_up", lambda home, op: (2, target))

    def broker_down(*args: Any) -> Any:
        raise StreamError("Kafka at 127.0.0.1:9 did not answer within 10s")

    monkeypatch.setattr(scaling, "catch_up_state", broker_down)
    with pytest.raises(TaskDeferred) as deferred:
        tasks.WaitCaughtUp(task_id="wait_caught_up", op={}).execute({})  # type: ignore[arg-type]
    trigger = deferred.value.trigger
    assert isinstance(trigger, ScalingWaitTrigger)
    assert (trigger.job, trigger.version, trigger.wait, trigger.target) == (JOB, 2, CATCH_UP, target)
    said = capsys.readouterr().out
    assert f"could not look at v2 of {JOB} (Kafka at 127.0.0.1:9 did not answer within 10s): waiting on the " in said

    def bug(*args: Any) -> Any:
        raise KeyError("offsets")

    monkeypatch.setattr(scaling, "catch_up_state", bug)
    with pytest.raises(KeyError):
        tasks.WaitCaughtUp(task_id="wait_caught_up_2", op={}).execute({})  # type: ignore[arg-type]
