"""The embedded log's storage goes away while a job runs, and comes back: the job waits, says so, loses nothing."""

from __future__ import annotations

import threading
import time

import pytest

from pipelines.control import ControlPlane
from pipelines.jobs.config import JobConfig
from pipelines.observe.collect import observe
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from .jobs import SeqProducer, job, misrouted, order_violations, sink

pytestmark = pytest.mark.integration


def test_a_job_waits_out_its_embedded_logs_storage_going_away_and_resumes_with_nothing_lost(spark, home: Home) -> None:
    """The streams' directory vanishes (a detached mount) for 8 s while a factor-2 job runs, then returns."""
    producer = SeqProducer(DeltaLog(home.streams), "events", 2, keys=16)
    config = job(home, "log_outage", 2, max_records=100)
    producer.produce(300)
    driver = threading.Thread(
        target=lambda: run_job(spark, home, config.name, available_now=False, progress=lambda m: None)
    )
    driver.start()
    streams = home.streams.local_path()
    away = streams.with_name(streams.name + ".detached")
    deadline = time.monotonic() + 240
    try:
        while _rows(home, config) < producer.total and time.monotonic() < deadline:
            time.sleep(0.3)
        streams.rename(away)
        time.sleep(8.0)  # several plans find the storage gone
        assert driver.is_alive(), "the job waits for its input's storage instead of failing"
        away.rename(streams)
        producer.produce(300)
        while _rows(home, config) < producer.total and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        if away.exists() and not streams.exists():
            away.rename(streams)
        requests.ask_stop(home, config.name)
        driver.join(timeout=120)
    assert not driver.is_alive(), "the driver survived the outage and stopped when asked"
    rows = sink(home, config)
    assert len(rows) == producer.total == 600, f"{len(rows)} rows for {producer.total} records"
    assert not rows.duplicated(["partition", "offset"]).any()
    assert order_violations(rows) == []
    assert misrouted(rows, 2).empty
    assert verify_job(home, config.name, sequence="seq").ok
    reports = ControlPlane(home).metrics.read(config.name, metrics=["input_unavailable_s", "input_recovered_s"])
    assert (reports["metric"] == "input_unavailable_s").sum() >= 1, "the outage is reported"
    recovered = reports[reports["metric"] == "input_recovered_s"]["value"]
    assert len(recovered) >= 1 and recovered.max() >= 5.0, f"and its end, with its length: {recovered.tolist()}"
    outages = [m for m in observe(home, config.name, inputs=False)["markers"] if m["kind"] == "outage"]
    assert outages and all(m["until"] is not None for m in outages), "the view marks the outage, ended"


def _rows(home: Home, config: JobConfig) -> int:
    table = home.sinks / config.sink_table
    return len(sink(home, config)) if (table / "_delta_log").local_path().exists() else 0
