"""A job enriches its events through adjunct stores on real Spark and Delta, across a rescale."""

from __future__ import annotations

import pytest

from pipelines.adjunct.checkpoints import read_store_checkpoints
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.integration.runtime.jobs import DEMO, order_violations, produce, sink
from tests.integration.runtime.test_rescale import rescale

KEYS = 16
STORES = {
    "owned": {"input": "customers", "partitioning": "partitioned", "bootstrap": True},
    "everything": {"input": "customers", "partitioning": "broadcast", "bootstrap": True, "persistence": "memory"},
}


def config(name: str, stores: dict | None = None) -> JobConfig:
    base = JobConfig.load(DEMO).to_dict()
    base.update(
        name=name,
        process="tests.integration.adjunct.enrich:process",
        process_options={},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": 100, "trigger_interval": "0 seconds"},
        stores=stores or STORES,
    )
    return JobConfig.from_dict(base)


def test_enrichment_through_stores_stays_consistent_across_a_rescale(spark, home: Home) -> None:
    log = DeltaLog(home.streams)
    log.create("customers", 2)
    log.produce("customers", [(f"key-{i}".encode(), f"name-{i}".encode(), None) for i in range(KEYS)])
    produce(home, "events", 160, KEYS)
    job = config("enrich_stores")
    create_job(home, job)
    run_job(spark, home, job.name, available_now=True, progress=lambda m: None)
    rows = sink(home, job)
    assert len(rows) == 160
    assert (rows["enriched"] == rows["event_key"].str.replace("key-", "name-")).all()

    # an update and a delete while the job runs on, then a rescale to 4 virtual tasks per partition
    log.produce("customers", [(b"key-3", b"renamed", None), (b"key-4", b"", None)])
    produce(home, "events", 160, KEYS)
    rescale(home, job.name, 4, reason="scale up with stores")
    run_job(spark, home, job.name, available_now=True, progress=lambda m: None)
    rows = sink(home, job)
    assert len(rows) == 320 and not rows.duplicated(["partition", "offset"]).any()
    late = rows[rows["model_version"] == 2]
    assert len(late) == 160 and late["virtual_task"].nunique() > 2, "the rescaled model ran more virtual tasks"
    expected = late["event_key"].str.replace("key-", "name-").where(late["event_key"] != "key-3", "renamed")
    expected = expected.where(late["event_key"] != "key-4", None)
    assert late["enriched"].tolist() == expected.tolist()
    assert order_violations(late) == []  # (the helper restarts each key's seq at every produce)
    saved = read_store_checkpoints(home, job.name)  # the versions the last committed batch saw, per store
    ends = log.end_positions("customers")
    assert set(saved) == {"owned", "everything"}
    assert all(c.positions == ends and c.incarnation for c in saved.values()), (saved, ends)


def test_a_partitioned_store_on_a_stream_not_co_partitioned_is_refused(home: Home) -> None:
    log = DeltaLog(home.streams)
    log.create("customers", 3)
    produce(home, "events", 4, 2)
    with pytest.raises(ConfigError, match=r"not co-partitioned.*3 partitions against 2"):
        create_job(home, config("bad", {"owned": {"input": "customers", "partitioning": "partitioned"}}))


def test_an_unknown_store_stream_is_refused(home: Home) -> None:
    produce(home, "events", 4, 2)
    with pytest.raises(ConfigError, match="cannot be described"):
        create_job(home, config("bad", {"owned": {"input": "nope"}}))
