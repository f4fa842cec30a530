"""A job reading Kafka end to end on real Spark and Delta, against a Kafka-protocol broker (librdkafka's mock).

The same checks as the embedded log's (``test_elastic_job``, ``test_rescale``):
every record once, keys in order, buckets where the hash puts them; plus the
job's progress visible in its Kafka consumer group. Spark's Python workers
are other processes: they reach the broker at its 127.0.0.1 address.
"""

from __future__ import annotations

import math
import threading
import time

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import batch_budget, run_job
from pipelines.systems.kafka import KafkaSystem
from pipelines.systems.kafka_mock import MockKafka
from tests.integration.kafka_fixtures import unique_topic

from .jobs import DEMO, SeqProducer, misrouted, order_violations, sink
from .test_rescale import rescale


class KafkaEvents(SeqProducer):
    """Demo events on a Kafka topic of the test broker with a per-key seq that continues across calls."""

    def __init__(self, broker: MockKafka, partitions: int, keys: int) -> None:
        self.topic = unique_topic("events")
        broker.create_topic(self.topic, partitions)
        self.settings = {"bootstrap_servers": broker.bootstrap, "timeout_ms": 5000, "read_timeout_ms": 10000}
        self.kafka = KafkaSystem(self.settings)
        super().__init__(self.kafka, self.topic, partitions, keys, create=False)


def kafka_job(home: Home, name: str, factor: int, events: KafkaEvents, *, max_records: int = 100) -> JobConfig:
    base = JobConfig.load(DEMO).to_dict()
    base.update(
        name=name,
        inputs=[{"system": "kafka", "stream": events.topic}],
        systems={"kafka": events.settings},
        elasticity_factor=factor,
        process_options={"latency_ms": 0},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": max_records, "trigger_interval": "0 seconds"},
    )
    config = JobConfig.from_dict(base)
    create_job(home, config)
    return config


def test_a_kafka_job_at_factors_1_and_4_gives_the_same_rows_once_in_key_order(
    spark, home: Home, kafka_broker: MockKafka
) -> None:
    events = KafkaEvents(kafka_broker, partitions=2, keys=64)
    events.produce(500)
    outputs = {}
    for factor in (1, 4):
        config = kafka_job(home, f"kafka-f{factor}", factor, events)
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
        rows = sink(home, config)
        assert len(rows) == events.total, f"factor {factor}: {len(rows)} rows for {events.total} records"
        assert not rows.duplicated(["partition", "offset"]).any()
        assert order_violations(rows) == []
        assert misrouted(rows, factor).empty
        assert rows["virtual_task"].nunique() == 2 * factor
        budget = batch_budget(100, factor)
        assert rows["batch_id"].nunique() >= math.ceil(events.total / budget) > 1, "admission control splits the input"
        outputs[factor] = set(zip(rows["partition"], rows["offset"], rows["event_key"], rows["seq"], strict=True))
        # The job's progress is in its consumer group, where Kafka's lag tools look.
        assert events.kafka.committed(config.name, events.topic) == events.kafka.end_positions(events.topic)
        lag = ControlPlane(home).metrics.read(config.name)
        lag = lag[lag["metric"] == "lag_records"]
        assert lag.groupby("task")["value"].last().eq(0).all()
    assert outputs[1] == outputs[4]
    events.kafka.close()


def test_a_kafka_job_rescaled_while_producing_passes_the_data_quality_checks(
    spark, home: Home, kafka_broker: MockKafka
) -> None:
    events = KafkaEvents(kafka_broker, partitions=2, keys=24)
    config = kafka_job(home, "kafka-live", 1, events, max_records=80)
    events.produce(200)
    messages: list[str] = []
    driver = threading.Thread(
        target=lambda: run_job(spark, home, config.name, available_now=False, progress=messages.append)
    )
    driver.start()
    control = ControlPlane(home)
    deadline = time.monotonic() + 180
    try:
        while (control.checkpoints.latest_batch(config.name, 1) or -1) < 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        stop_producing = threading.Event()

        def keep_producing() -> None:
            while not stop_producing.is_set():
                events.produce(20)
                time.sleep(0.05)

        producer = threading.Thread(target=keep_producing)
        producer.start()
        rescale(home, config.name, 4, reason="scale up while producing")
        while not any("switching" in m for m in messages) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # the new model reads while records keep arriving
        stop_producing.set()
        producer.join()
        while time.monotonic() < deadline:
            if (
                len(sink(home, config)) >= events.total
                and (control.checkpoints.latest_batch(config.name, 2) or -1) >= 0
            ):
                break
            time.sleep(0.3)
    finally:
        requests.ask_stop(home, config.name)
        driver.join(timeout=120)
    assert not driver.is_alive()
    assert any("model v2 is active: switching" in m for m in messages), messages
    rows = sink(home, config)
    assert len(rows) == events.total
    assert not rows.duplicated(["stream", "partition", "offset"]).any()
    assert order_violations(rows) == []
    assert set(rows["model_version"]) == {1, 2}
    (event,) = ControlPlane(home).events.history(config.name)
    verdict = verify_job(home, config.name, sequence="seq", event=event.event_id)
    assert verdict.ok, verdict.summary()
    events.kafka.close()


def test_a_kafka_job_waits_out_a_broker_outage_and_resumes_with_nothing_lost(spark, home: Home) -> None:
    with MockKafka() as broker:  # its own broker: this test takes it down
        events = KafkaEvents(broker, partitions=2, keys=16)
        events.settings["timeout_ms"] = 1500  # planning gives up on a silent broker quickly, then tries again
        config = kafka_job(home, "kafka-outage", 2, events, max_records=50)
        events.produce(150)
        messages: list[str] = []
        driver = threading.Thread(
            target=lambda: run_job(spark, home, config.name, available_now=False, progress=messages.append)
        )
        driver.start()
        control = ControlPlane(home)
        deadline = time.monotonic() + 180
        try:
            while len(sink(home, config)) < events.total and time.monotonic() < deadline:
                time.sleep(0.2)
            batches_before = control.checkpoints.latest_batch(config.name, 1) or 0
            broker.set_down(True)
            time.sleep(4.0)  # several triggers find the input silent
            batches_down = control.checkpoints.latest_batch(config.name, 1) or 0
            broker.set_down(False)
            events.produce(150)
            while len(sink(home, config)) < events.total and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            requests.ask_stop(home, config.name)
            driver.join(timeout=120)
        assert not driver.is_alive(), "the driver survived the outage and stopped when asked"
        assert batches_down <= batches_before + 1, "no batch was planned while the broker was down"
        rows = sink(home, config)
        assert len(rows) == events.total == 300
        assert not rows.duplicated(["stream", "partition", "offset"]).any()
        assert order_violations(rows) == []
        assert events.kafka.committed(config.name, events.topic) == events.kafka.end_positions(events.topic)
        reports = control.metrics.read(config.name, metrics=["input_unavailable_s", "input_recovered_s"])
        down = reports[reports["metric"] == "input_unavailable_s"]
        back = reports[reports["metric"] == "input_recovered_s"]
        assert len(down) == 1, "the outage is reported once (then every 30 s), not once per try"
        assert len(back) == 1 and 2.0 <= back["value"].iloc[0] <= 60.0, f"its length is recorded: {back}"
        events.kafka.close()
