"""Rescaling and partition expansion on real Spark and Delta: every record once, every key in order."""

from __future__ import annotations

import json

import pytest

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.core.model import JobModel
from pipelines.operations.scaling import apply_plan
from pipelines.planning import plan_next
from pipelines.quality.verify import verify_job
from pipelines.runtime.driver import run_job
from pipelines.systems.deltalog import DeltaLog

from .jobs import job, misrouted, order_violations, sink


def rescale(home: Home, job: str, factor: object, reason: str = "test") -> JobModel:
    """Plan, save and activate a new factor in one go (no driver to coordinate), as a scaling event."""
    version = plan_next(home, job, factor=factor)
    apply_plan(home, version, reason)
    return version.model


class Producer:
    """Demo events with a per-key seq that continues across calls (the order the checks prove)."""

    def __init__(self, home: Home, stream: str, partitions: int, keys: int) -> None:
        self.log = DeltaLog(home.streams)
        self.log.create(stream, partitions)
        self.stream, self.keys, self.seq, self.total = stream, keys, {}, 0

    def produce(self, n: int) -> None:
        batch = []
        for i in range(n):
            key = f"key-{(self.total + i) % self.keys}"
            s = self.seq.get(key, 0)
            self.seq[key] = s + 1
            batch.append((key.encode(), json.dumps({"key": key, "seq": s, "payload": "p"}).encode(), None))
        self.log.produce(self.stream, batch)
        self.total += n


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

    from pipelines.runtime.requests import stop_request

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
    while (control.checkpoints.latest_batch(config.name, 1) or -1) < 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    producer.produce(300)  # the old query is still committing batches while the rescale migrates
    rescale(home, config.name, 4, reason="scale up while running")
    while not any("switching" in m for m in messages) and time.monotonic() < deadline:
        time.sleep(0.2)
    producer.produce(200)  # for the new model
    while time.monotonic() < deadline:
        if len(sink(home, config)) >= producer.total and (control.checkpoints.latest_batch(config.name, 2) or -1) >= 0:
            break
        time.sleep(0.3)
    stop_request(home, config.name).parent.mkdir(parents=True, exist_ok=True)
    stop_request(home, config.name).touch()
    driver.join(timeout=120)
    assert not driver.is_alive()
    assert queries == [2], messages
    assert any("model v2 is active: switching" in m for m in messages), messages
    rows = sink(home, config)
    assert len(rows) == producer.total
    assert not rows.duplicated(["stream", "partition", "offset"]).any(), "a record was read by both models"
    assert order_violations(rows) == []
    assert set(rows["model_version"]) == {1, 2}
