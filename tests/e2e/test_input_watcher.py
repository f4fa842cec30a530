"""The input watcher, run as the triggerer runs it: it fires when a look finds something to do, and only then.

A real home with a real job on the embedded log; the inputs are repartitioned and the lock taken through the
platform's own API while the trigger runs. What ``repartition_watch`` does once woken is in ``test_dags``; the
watcher registered by a real Airflow and waking the DAG is in ``test_schedules``.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pipelines_airflow.watchers import INPUT_CHANGES, InputChangeTrigger

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock, process_owner
from pipelines.core.groupers import plan_job_model
from pipelines.demo import producer
from pipelines.jobs.config import CONFIG_KEY, JobConfig, job_config
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

REPO = Path(__file__).resolve().parents[2]
JOB = "watched"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    log = DeltaLog(home.streams)
    log.create("events", 2)
    producer.produce(log, home, "events", 40, 5, seed=1)
    raw = JobConfig.load(REPO / "include/jobs/enrichment.yaml").to_dict()
    raw.update(name=JOB, sink={"table": f"{JOB}_out"}, dead_letter={"table": f"{JOB}_dead"})
    create_job(home, JobConfig.from_dict(raw))
    return home


async def _events(trigger: InputChangeTrigger, seconds: float, *, at: dict[float, Callable[[], Any]]) -> list[Any]:
    """The events the trigger fires in ``seconds``, the changes of ``at`` made at their moments (in threads)."""
    fired: list[Any] = []

    async def collect() -> None:
        async for event in trigger.run():
            fired.append(event.payload["found"])

    async def change() -> None:
        waited = 0.0
        for moment, act in sorted(at.items()):
            await asyncio.sleep(moment - waited)
            waited = moment
            await asyncio.to_thread(act)

    task = asyncio.create_task(collect())
    changes: Awaitable[None] = change()
    await changes
    await asyncio.sleep(max(0.0, seconds - max(at, default=0.0)))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return fired


def test_the_watcher_is_an_event_trigger_of_the_dags_asset_and_rebuilds_from_what_it_serializes() -> None:
    [watcher] = INPUT_CHANGES.watchers
    path, kwargs = watcher.trigger.serialize()
    assert path == "pipelines_airflow.watchers.InputChangeTrigger"
    again = InputChangeTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_an_expansion_fires_once_and_again_only_while_it_stays_unabsorbed(home: Home) -> None:
    trigger = InputChangeTrigger(home=str(home.root), poll_s=0.1, again_s=2.5)
    expand = lambda: DeltaLog(home.streams).expand("events", 4)  # noqa: E731
    fired = asyncio.run(_events(trigger, 4.0, at={1.0: expand}))
    key = f"{JOB}: deltalog/events 2 -> 4 on v1: absorb"
    # nothing for the first second (the inputs match the model), then once at the expansion, then once more when
    # it was still there after again_s (its run failed, or none ran): not at every look
    assert fired == [[key], [key]], fired


def test_a_change_it_cannot_absorb_is_said_once_and_a_held_lock_is_waited_out(home: Home) -> None:
    DeltaLog(home.streams).expand("events", 4)
    control = ControlPlane(home)
    v1 = control.job_models.active(JOB)
    [stream] = job_config(v1).inputs
    three = plan_job_model(JOB, 2, {stream: 3}, grouper=v1.grouper, config={CONFIG_KEY: v1.config[CONFIG_KEY]})
    control.job_models.save(three, reason="planned when the topic had 3 partitions")
    control.job_models.activate(JOB, 2)
    owner = process_owner("cli")  # this process: alive, so the job is busy
    ScalingLock(home).acquire(JOB, owner, "a rescale")
    release = lambda: ScalingLock(home).release(JOB, owner)  # noqa: E731
    trigger = InputChangeTrigger(home=str(home.root), poll_s=0.1, again_s=0.5)
    fired = asyncio.run(_events(trigger, 3.0, at={1.0: release}))
    [[said]] = fired  # nothing while the lock was held; the refusal once after, though again_s passed four times
    assert said == f"{JOB}: deltalog/events 3 -> 4 on v2: refused", fired


def test_a_lock_a_dead_process_left_on_a_job_with_nothing_to_absorb_is_found_to_settle(home: Home) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"cli:{socket.gethostname()}:{int(gone.stdout)}:deadbeef"
    ScalingLock(home).acquire(JOB, dead, "a rescale killed after its activation")
    trigger = InputChangeTrigger(home=str(home.root), poll_s=0.1, again_s=60)
    fired = asyncio.run(_events(trigger, 1.0, at={}))
    assert fired == [[f"{JOB}: settle what {dead} left"]], fired
