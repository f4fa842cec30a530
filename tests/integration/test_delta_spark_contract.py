"""delta-spark reads every Delta table the platform writes with delta-rs, and finds what our own readers find.

The platform writes all its tables with delta-rs (``deltalake``); its users
read them with Spark. After a run, a rescale, an input expansion and an
adjunct store's version switch on the embedded log, every table in the home
(control plane, streams, sink, dead letters, adjunct state) is read with
``spark.read.format("delta")`` and ``DeltaTable.forPath``: rows, schema and
commit history must equal what ``pipelines.deltaio`` and ``deltalake`` read.
A downstream ``spark.readStream.format("delta")`` on a sink gets every record
exactly once across a live rescale and an ``OPTIMIZE`` of the sink beside the
driver's commits. One shared Spark session, small data.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.adjunct.extract import end_of_dataset_record
from pipelines.control import ControlPlane
from pipelines.deltaio import read_delta
from pipelines.jobs.config import JobConfig
from pipelines.operations.autosize import evaluate
from pipelines.operations.jobs import create_job
from pipelines.operations.scaling.start import apply_plan
from pipelines.planning import plan_next
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.integration.runtime.jobs import DEMO, SeqProducer, job, sink
from tests.integration.runtime.test_rescale import rescale

pytestmark = pytest.mark.integration

KEYS = 12


def _stores_job(name: str) -> JobConfig:
    base = JobConfig.load(DEMO).to_dict()
    base.update(
        name=name,
        process="tests.integration.adjunct.enrich:process",
        process_options={},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": 60, "trigger_interval": "0 seconds"},
        stores={
            "owned": {"input": "customers", "partitioning": "partitioned", "bootstrap": True},
            "everything": {"input": "customers", "partitioning": "broadcast", "bootstrap": True},
            "catalog": {"input": "catalog", "partitioning": "broadcast", "dataset": "bounded", "bootstrap": True},
        },
    )
    return JobConfig.from_dict(base)


def _run(spark: Any, home: Home, job: str) -> None:
    run_job(spark, home, job, available_now=True, progress=lambda m: None)


def _tables(home: Home) -> list[Path]:
    return sorted(p.parent for p in home.root.local_path().rglob("_delta_log") if p.is_dir())


def _plain(value: Any) -> Any:
    """A value as Python compares it across both readers: aware datetimes in UTC, containers element-wise."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _rows(table: pa.Table) -> list[str]:
    """Rows as a sorted multiset, columns by name (the readers may order partition columns differently)."""
    names = sorted(table.column_names)
    return sorted(repr([_plain(row[n]) for n in names]) for row in table.to_pylist())


def _history(rows: list[dict[str, Any]]) -> tuple[list[int], dict[str, int]]:
    versions = sorted(int(r["version"]) for r in rows)
    return versions, dict(collections.Counter(str(r["operation"]) for r in rows))


def _compare(spark: Any, path: Path) -> dict[str, Any]:
    """What differs between delta-spark's and our readers' view of one table (empty: nothing)."""
    from delta.tables import DeltaTable as SparkDeltaTable

    ours = DeltaTable(str(path))
    frame = spark.read.format("delta").load(str(path))
    spark_table = SparkDeltaTable.forPath(spark, str(path))
    problems: dict[str, Any] = {}
    our_rows, their_rows = _rows(read_delta(path)), _rows(frame.toArrow())
    if their_rows != our_rows:
        problems["rows"] = (len(our_rows), len(their_rows), sorted(set(our_rows) ^ set(their_rows))[:3])
    our_schema, their_schema = json.loads(ours.schema().to_json()), json.loads(frame.schema.json())
    if our_schema != their_schema:
        problems["schema"] = (our_schema, their_schema)
    our_history = _history(ours.history())
    their_history = _history([r.asDict() for r in spark_table.history().select("version", "operation").collect()])
    if our_history != their_history or our_history[0][-1] != ours.version():
        problems["history"] = (ours.version(), our_history, their_history)
    detail = spark_table.detail().collect()[0].asDict()
    metadata = ours.metadata()
    ours_detail = (len(ours.file_uris()), list(metadata.partition_columns), dict(metadata.configuration))
    their_detail = (detail["numFiles"], list(detail["partitionColumns"]), dict(detail["properties"]))
    if ours_detail != their_detail:
        problems["files, partitioning, properties"] = (ours_detail, their_detail)
    return problems


def test_delta_spark_reads_every_table_after_a_run_a_rescale_an_expansion_and_a_store_switch(
    spark: Any, home: Home
) -> None:
    log = DeltaLog(home.streams)
    log.create("customers", 2)
    log.produce("customers", [(f"key-{i}".encode(), f"name-{i}".encode(), None) for i in range(KEYS)])
    log.create("catalog", 1)
    log.produce("catalog", [(b"sku-1", b"v0", None), end_of_dataset_record()])
    events = SeqProducer(log, "events", 2, keys=KEYS)
    config = _stores_job("contract")
    create_job(home, config)

    events.produce(80)
    log.produce("events", [(b"key-1", b"{not json", None)])  # a dead letter
    _run(spark, home, config.name)  # a run
    rescale(home, config.name, 2, reason="contract: scale up")
    events.produce(40)
    _run(spark, home, config.name)  # a rescale
    events.produce(40)
    for stream in ("events", "customers"):  # a partitioned store's stream stays co-partitioned with the input
        log.expand(stream, 4)
    apply_plan(home, plan_next(home, config.name, factor=2), reason="contract: expansion")
    events.produce(40)
    _run(spark, home, config.name)  # an expansion
    log.produce("catalog", [(b"sku-1", b"v1", None), (b"sku-2", b"v1", None), end_of_dataset_record()])
    log.produce("customers", [(b"key-3", b"renamed", None)])
    events.produce(40)
    _run(spark, home, config.name)  # the bounded store switches to its next version
    evaluate(home, config.name, record=True)  # an autosize decision
    verdict = verify_job(home, config.name, sequence="seq")
    ControlPlane(home).dq_results.append(  # as `pipelines verify` records it (its Great Expectations run aside)
        [
            {
                "job": config.name,
                "window": "run:contract",
                "check": "no_loss",
                "success": verdict.ok,
                "observed": 0,
                "checked": verdict.records_expected,
            }
        ]
    )

    rows = sink(home, config)
    assert len(rows) == events.total and set(rows["model_version"]) == {1, 2, 3}
    tables = _tables(home)
    kinds = {str(t.relative_to(home.root.local_path())).split("/")[0] for t in tables}
    assert kinds == {"control", "streams", "sinks", "adjunct"}, tables
    named = {t.name for t in tables}
    assert {"events", "customers", "catalog", "contract_out", "contract_dead"} <= named
    control = {"job_models", "checkpoints", "scaling_events", "scaling_locks", "metrics", "adjunct_checkpoints"}
    assert control | {"autosize_decisions", "dq_results"} <= named
    assert {"incarnations", "changes", "snapshots"} <= named, "adjunct state: incarnations, segments, snapshots"

    problems = {str(t.relative_to(home.root.local_path())): p for t in tables if (p := _compare(spark, t))}
    assert not problems, json.dumps(problems, indent=1, default=str)[:6000]


def test_a_spark_stream_on_a_sink_gets_every_record_once_across_a_live_rescale(spark: Any, home: Home) -> None:
    events = SeqProducer(DeltaLog(home.streams), "events", 2, keys=20)
    config = job(home, "downstream", 1, max_records=100)
    events.produce(200)
    messages: list[str] = []
    driver = threading.Thread(
        target=lambda: run_job(spark, home, config.name, available_now=False, progress=messages.append)
    )
    driver.start()
    control = ControlPlane(home)
    sink_path = str(home.sinks / config.sink_table)
    versions: list[set[int]] = []  # the model versions of each downstream batch's rows, in batch order
    rows_seen: collections.Counter[tuple[str, int, int]] = collections.Counter()
    lock = threading.Lock()

    def collect(frame: Any, batch_id: int) -> None:
        got = frame.select("stream", "partition", "offset", "model_version").collect()
        with lock:
            versions.append({r.model_version for r in got})
            rows_seen.update((r.stream, r.partition, r.offset) for r in got)

    def seen() -> int:
        with lock:
            return sum(rows_seen.values())

    downstream = None
    try:
        _until(lambda: control.checkpoints.latest_batch(config.name, 1) not in (None, -1), messages)
        downstream = (
            spark.readStream.format("delta")
            .load(sink_path)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(home.root / "downstream-checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        _until(lambda: seen() >= 200, messages)  # downstream has read model v1's first records
        events.produce(200)  # the old model commits on while the rescale migrates
        rescale(home, config.name, 4, reason="live rescale under a downstream reader")
        _until(lambda: any("switching" in m for m in messages), messages)
        events.produce(200)  # for the new model
        # a user compacting the sink with Spark's OPTIMIZE while the driver commits (docs/storage.md): the rewrite
        # (dataChange=false) must neither fail a batch's commit nor reach the downstream stream as new rows
        compacted = spark.sql(f"OPTIMIZE delta.`{sink_path}`").collect()[0]["metrics"]
        _until(lambda: seen() >= events.total, messages)
    finally:
        requests.ask_stop(home, config.name)
        driver.join(timeout=120)
        if downstream is not None:
            downstream.stop()
    assert not driver.is_alive()
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok, verdict.summary()
    rows = sink(home, config)
    assert set(rows["model_version"]) == {1, 2}
    assert sum(rows_seen.values()) == verdict.rows == len(rows) == events.total
    assert max(rows_seen.values()) == 1, "a sink row reached the downstream reader twice"
    assert compacted["numFilesRemoved"] > compacted["numFilesAdded"] >= 1, compacted
    read = [v for v in versions if v]
    assert read[0] == {1} and 2 in read[-1], f"downstream read v1's rows before the rescale, v2's after: {read}"


def _until(done: Callable[[], bool], messages: list[str], timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out; driver said: {messages[-5:]}"
        time.sleep(0.3)


def test_delta_spark_reads_a_stateful_jobs_state_tables(spark: Any, home: Home) -> None:
    """A state's ``current`` and ``changes`` tables, after rescales (a non-multiple too), a compaction and columns
    added by a new version, read the same through delta-spark; ``current`` is one row per key, its fold."""
    from tests.integration.state.helpers import TotalsProducer, totals_job

    producer = TotalsProducer.on_log(home, "events", 2, keys=KEYS)
    config = totals_job(home, "stateful", 1)
    producer.produce(100)
    _run(spark, home, config.name)
    rescale(home, config.name, 4, reason="contract: scale up")
    producer.produce(100)
    _run(spark, home, config.name)
    raw = config.to_dict()
    raw["state"] = [{**raw["state"][0], "value_schema": raw["state"][0]["value_schema"] + ", note STRING"}]
    apply_plan(home, plan_next(home, config.name, factor=3, config=raw), reason="contract: a column added")
    producer.produce(100)
    _run(spark, home, config.name)
    assert verify_job(home, config.name).ok

    state = home.root.local_path() / "state" / config.name / "totals"
    for table in ("current", "changes"):
        problems = _compare(spark, state / table)
        assert not problems, json.dumps(problems, indent=1, default=str)[:6000]
    current = spark.read.format("delta").load(str(state / "current"))
    assert "note" in current.columns
    folds = {
        r["customer"]: (r["events"], r["amount"], r["_records"])
        for r in current.selectExpr("CAST(key AS STRING) AS customer", "events", "amount", "_records").collect()
    }
    assert len(folds) == KEYS == current.count()  # one row per key
    assert folds == {k.decode(): (f.events, f.amount, f.events) for k, f in producer.folds.items()}
