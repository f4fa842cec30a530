"""Rescaling and partition expansion on real Spark and Delta: every record once, every key in order."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from pipelines.control import ControlPlane
from pipelines.core.model import JobModel
from pipelines.operations.scaling.start import apply_plan
from pipelines.planning import plan_next
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from .jobs import SeqProducer, job, misrouted, order_violations, sink


def rescale(home: Home, job: str, factor: object, reason: str = "test") -> JobModel:
    """Plan, save and activate a new factor in one go (no driver to coordinate), as a scaling event."""
    version = plan_next(home, job, factor=factor)
    apply_plan(home, version, reason)
    return version.model


class Producer(SeqProducer):
    """Demo events with a per-key seq that continues across calls, into the embedded log of ``home``."""

    def __init__(self, home: Home, stream: str, partitions: int, keys: int) -> None:
        super().__init__(DeltaLog(home.streams), stream, partitions, keys)
        self.log = self.system


@pytest.mark.parametrize("grouper", ["GroupByPartitionFixedTaskNum", "GroupByPartition"])
def test_scale_up_expand_and_scale_down_keep_every_record_once_and_in_order(spark, home: Home, grouper: str) -> None:
    producer = Producer(home, "events", 2, keys=40)
    config = job(home, "elastic", 1, max_records=120)
    steps = [("start", 1), ("up", 4), ("expand", 4), ("down", 2)]
    for step, factor in steps:
        if step == "expand":
            # Unread records of every key stay in the old partitions while newer ones land in the new
            # partitions: only holding the new partitions back keeps each key in order.
            producer.produce(300)
            producer.log.expand("events", 4)
            plan = plan_next(home, config.name, factor=factor, grouper=grouper)
            assert sorted(plan.model.partitions().values()) == [4]
            apply_plan(home, plan, reason="partition expansion")
        elif step != "start":
            rescale(home, config.name, factor, reason=f"scale {step}")
        producer.produce(300)
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
        rows = sink(home, config)
        assert len(rows) == producer.total, f"after {step}: {len(rows)} rows for {producer.total} records"
        assert not rows.duplicated(["stream", "partition", "offset"]).any(), f"after {step}: duplicates"
        assert order_violations(rows) == [], f"after {step}: keys out of order"
        for version, part in rows.groupby("model_version"):
            factor_of = ControlPlane(home).job_models.get(config.name, int(version)).elasticity_factor
            assert misrouted(part, factor_of).empty
    history = ControlPlane(home).job_models.history(config.name)
    assert [h["version"] for h in history if h["event"] == "activated"] == [1, 2, 3, 4]
    events = ControlPlane(home).events.history(config.name)
    assert [(e.from_version, e.to_version, e.status) for e in events] == [
        (1, 2, "activated"),
        (2, 3, "activated"),
        (3, 4, "activated"),
    ]
    for event in events:  # each scaling window verifies on its own: no loss, no dup, order, routing
        verdict = verify_job(home, config.name, sequence="seq", event=event.event_id)
        assert verdict.ok, verdict.summary()


def test_a_bad_factor_is_refused_and_the_job_keeps_its_model(home: Home) -> None:
    Producer(home, "events", 2, keys=4)
    config = job(home, "steady", 2)
    for bad in (0, -1, "x", 1.5):
        with pytest.raises(Exception, match="elasticity factor"):
            rescale(home, config.name, bad)
    assert ControlPlane(home).job_models.active_version(config.name) == 1


def test_a_running_driver_switches_models_in_the_same_application_without_rereading(spark, home: Home) -> None:
    import threading
    import time

    from pipelines.runtime import requests

    producer = Producer(home, "events", 2, keys=30)
    config = job(home, "live", 1, max_records=100)
    producer.produce(200)
    messages: list[str] = []
    queries: list[int] = []
    driver = threading.Thread(
        target=lambda: queries.append(run_job(spark, home, config.name, available_now=False, progress=messages.append))
    )
    driver.start()
    control = ControlPlane(home)
    deadline = time.monotonic() + 120
    while _latest(control, config.name, 1) < 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    producer.produce(300)  # the old query is still committing batches while the rescale migrates
    rescale(home, config.name, 4, reason="scale up while running")
    while not any("switching" in m for m in messages) and time.monotonic() < deadline:
        time.sleep(0.2)
    producer.produce(200)  # for the new model
    while time.monotonic() < deadline:
        if len(sink(home, config)) >= producer.total and _latest(control, config.name, 2) >= 0:
            break
        time.sleep(0.3)
    requests.ask_stop(home, config.name)
    driver.join(timeout=120)
    assert not driver.is_alive()
    assert queries == [2], messages
    assert any("model v2 is active: switching" in m for m in messages), messages
    rows = sink(home, config)
    assert len(rows) == producer.total
    assert not rows.duplicated(["stream", "partition", "offset"]).any(), "a record was read by both models"
    assert order_violations(rows) == []
    assert set(rows["model_version"]) == {1, 2}


def _latest(control: ControlPlane, job: str, version: int) -> int:
    """The version's latest checkpointed batch, -1 before its first (batch 0 is a batch: not ``or -1``)."""
    latest = control.checkpoints.latest_batch(job, version)
    return -1 if latest is None else latest


def test_a_driver_keeps_beating_while_it_switches_models(spark, home: Home, monkeypatch) -> None:
    """A slow stop at a batch boundary must not look like a dead driver (which gets a second, racing run)."""
    from pipelines.runtime import driver

    monkeypatch.setattr(driver, "HEARTBEAT_S", 0.5)
    real_stop = driver._stop_at_batch_boundary

    def slow_stop(query, *args, **kwargs):  # a batch that takes 12 s to finish, deterministically
        time.sleep(12.0)
        real_stop(query, *args, **kwargs)

    monkeypatch.setattr(driver, "_stop_at_batch_boundary", slow_stop)
    producer = Producer(home, "events", 2, keys=8)
    producer.produce(80)
    config = job(home, "beating", 1, max_records=40)
    control = ControlPlane(home)
    thread = threading.Thread(
        target=lambda: run_job(spark, home, config.name, available_now=False, progress=lambda m: None)
    )
    thread.start()
    try:
        _until(
            lambda: len(sink(home, config)) == 80 if (home.sinks / config.sink_table).local_path().exists() else False
        )
        switched_at = time.time()
        rescale(home, config.name, 2)
        _until(lambda: bool(_times(control, config.name, "query_started", version=2)))
        producer.produce(40)
        _until(lambda: len(sink(home, config)) == 120)
    finally:
        requests.ask_stop(home, config.name)
        thread.join(120)
    assert not thread.is_alive()
    beats = sorted(t for t in _times(control, config.name, "heartbeat") if t >= switched_at - 1)
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    started = _times(control, config.name, "query_started", version=2)[0]
    assert beats and beats[-1] > started, "beats continued after the switch"
    # every 0.5 s asked; a Delta append on a loaded machine may take a second or two, a stopped heartbeat 12 s
    assert max(gaps) < 6.0, f"no beat for {max(gaps):.1f}s during the switch (every 0.5 s asked): {gaps}"
    rows = sink(home, config)
    assert len(rows) == 120 and not rows.duplicated(["partition", "offset"]).any()


def _times(control: ControlPlane, job: str, metric: str, version: int | None = None) -> list[float]:
    frame = control.metrics.read(job, metrics=[metric])
    if version is not None and len(frame):
        frame = frame[frame["model_version"] == version]
    return sorted(float(v) for v in frame["value"]) if len(frame) else []


def _until(done, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)
