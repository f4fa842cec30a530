"""Scaling operations on one job queue on its lock, then plan again against the model that is active by then.

The real ``scaling.begin`` on real Delta tables: one operation holds the
job's lock and changes the model; the other, decided on the model before,
waits for the lock and is planned again (an expansion, an operator's factor),
asked again (an autosizer's), or skipped with the reason. No Spark: nothing
here runs a batch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines import planning
from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingInProgressError, ScalingLock
from pipelines.operations import repartition, scaling
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from ..runtime.jobs import job, produce

QUIET = lambda message: None  # noqa: E731
REPO = Path(__file__).resolve().parents[3]


def went_first(home: Home, job_name: str, owner: str, version: planning.VersionPlan, hold_s: float) -> threading.Thread:
    """Another operation: takes the lock, activates ``version`` while holding it, lets go after ``hold_s``."""
    lock = ScalingLock(home)
    lock.acquire(job_name, owner, "the operation that went first")

    def finish() -> None:
        time.sleep(hold_s)
        planning.save(home, version, "the operation that went first", owner=owner, activate=True)
        lock.release(job_name, owner)

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def test_a_rescale_that_waited_for_an_expansion_is_planned_on_the_expanded_model(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "queued", 1)
    said: list[str] = []
    request = scaling.ScalingRequest(config.name, 4, "operator", decided_on=1)  # chosen while v1 ran
    DeltaLog(home.streams).expand("events", 4)
    [change] = repartition.detect(home, [config.name])
    assert change.version == 1 and change.request().decided_on == 1
    expansion = planning.plan_next(home, config.name, grouper=change.request().grouper)
    first = went_first(home, config.name, "airflow:repartition_watch:first", expansion, hold_s=1.5)
    try:
        op = scaling.begin(home, request, "airflow:elastic_rescale:second", lock_wait_s=60, poll_s=0.2, say=said.append)
    finally:
        first.join()
    event = ControlPlane(home).events.history(config.name)[-1]
    assert (event.from_version, event.to_factor) == (2, 4)  # planned on the expansion's v2, not on v1
    assert event.details["virtual_tasks"] == 8 and sorted(event.details["partitions"].values()) == [4]
    assert event.details["grouper"] == "GroupByPartitionFixedTaskNum"  # the expansion's: keys stay on their tasks
    assert any("waiting for the scaling lock" in line for line in said), said
    assert f"the rescale of {config.name} was decided on v1; v2 is active now: factor 4 is planned on v2" in said
    scaling.finish(home, op, say=QUIET)


def test_an_autosizer_decision_made_for_an_older_model_is_asked_again_and_skipped_when_it_holds(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "asked", 1)
    request = scaling.ScalingRequest(config.name, 2, "autosize up", decided_on=1, autosized=True)
    DeltaLog(home.streams).expand("events", 4)
    expansion = planning.plan_next(home, config.name, grouper="GroupByPartitionFixedTaskNum")
    went_first(home, config.name, "airflow:repartition_watch:first", expansion, hold_s=0.5).join()
    control = ControlPlane(home)
    with pytest.raises(scaling.ScalingSkipped) as skipped:
        scaling.begin(home, request, "airflow:elastic_rescale:auto", say=QUIET)
    why = str(skipped.value)
    assert why.startswith(f"the rescale of {config.name} was decided on v1; v2 is active now, and the autosizer asked ")
    assert "says hold" in why and why.endswith("factor 2 was not applied"), why
    assert control.job_models.active_version(config.name) == 2 and control.job_models.latest_version(config.name) == 2
    assert control.events.history(config.name) == []  # no operation was opened
    assert ScalingLock(home).state(config.name).status == "released"  # and the lock is free for the next


def test_a_request_that_finds_its_model_already_in_force_after_the_wait_is_skipped(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "same", 1)
    to_two = planning.plan_next(home, config.name, factor=2)
    first = went_first(home, config.name, "cli:first", to_two, hold_s=1.0)
    try:
        with pytest.raises(scaling.ScalingSkipped, match=r"already runs this model \(v2, factor 2\): nothing to do"):
            scaling.begin(
                home,
                scaling.ScalingRequest(config.name, 2, "the same", decided_on=1),
                "cli:second",
                lock_wait_s=60,
                poll_s=0.2,
                say=QUIET,
            )
    finally:
        first.join()
    assert ScalingLock(home).state(config.name).status == "released"


def test_a_wait_past_its_bound_is_refused_naming_the_holder_and_changes_nothing(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "bound", 1)
    ScalingLock(home).acquire(config.name, "airflow:repartition_watch:slow", "a long absorption")
    started = time.monotonic()
    with pytest.raises(ScalingInProgressError, match="airflow:repartition_watch:slow holds it for 'a long absorption'"):
        scaling.begin(
            home, scaling.ScalingRequest(config.name, 2, "r"), "cli:w", lock_wait_s=1.0, poll_s=0.2, say=QUIET
        )
    assert 1.0 <= time.monotonic() - started < 30
    assert ControlPlane(home).job_models.latest_version(config.name) == 1


@pytest.mark.slow  # the CLI's rescale may start a Spark driver (this one stops before: it finds nothing to do)
def test_the_clis_rescale_that_waited_and_finds_its_factor_in_force_says_skipped_and_exits_0(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "cli_waits", 1)
    first = went_first(home, config.name, "cli:first", planning.plan_next(home, config.name, factor=2), hold_s=3.0)
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), "rescale", config.name, "--factor", "2"]
    try:
        done = subprocess.run([*argv, "--lock-wait", "60"], env=env, capture_output=True, text=True, timeout=120)
    finally:
        first.join()
    assert done.returncode == 0, done.stderr
    assert "waiting for the scaling lock" in done.stderr + done.stdout
    assert done.stdout.strip().endswith(
        f"skipped: job {config.name} already runs this model (v2, factor 2): nothing to do"
    ), done.stdout
    assert ControlPlane(home).job_models.latest_version(config.name) == 2  # nothing planned after the wait


def test_a_retry_that_holds_the_lock_and_is_skipped_lets_it_go(home: Home) -> None:
    """A first try took the lock and died before opening its event; the retry finds nothing to do: no lease left."""
    produce(home, "events", 40, keys=5)
    config = job(home, "retried", 1)
    owner = "airflow:elastic_rescale:retried"
    ScalingLock(home).acquire(config.name, owner, "the first try")
    with pytest.raises(scaling.ScalingSkipped, match="nothing to do"):
        scaling.begin(home, scaling.ScalingRequest(config.name, 1, "same factor"), owner, say=QUIET)
    assert ScalingLock(home).state(config.name).status == "released"
