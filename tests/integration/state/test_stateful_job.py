"""A stateful job on real Spark and Delta: every key's state is the fold of its records through every rescale (up,
down by a non-multiple), an input expansion and restarts, and the state check proves it without knowing the fold."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from pipelines.control import ControlPlane
from pipelines.deltaio import read_delta
from pipelines.operations.scaling.start import apply_plan
from pipelines.planning import plan_next
from pipelines.quality.verify import verify_job
from pipelines.runtime import requests
from pipelines.runtime.driver import run_job
from pipelines.state import layout
from pipelines.state.durable import BATCH_KEY, SEGMENT_KEY, StateTables
from pipelines.storage.home import Home

from .helpers import TotalsProducer, fold_mismatches, state_rows, totals_job


def _run(spark: object, home: Home, job: str) -> None:
    run_job(spark, home, job, available_now=True, progress=lambda m: None)


def test_state_follows_its_keys_through_rescales_an_expansion_and_a_non_multiple(spark, home: Home) -> None:
    producer = TotalsProducer.on_log(home, "events", 2, keys=30)
    config = totals_job(home, "totals", 1)
    steps = [("start", 1), ("up", 4), ("expand", 4), ("down to a non-multiple", 3), ("up again", 6)]
    for step, factor in steps:
        if step == "expand":
            producer.produce(200)
            producer.system.expand("events", 4)
            apply_plan(home, plan_next(home, config.name, factor=factor, grouper="GroupByPartitionFixedTaskNum"), "x")
        elif step != "start":
            apply_plan(home, plan_next(home, config.name, factor=factor), f"scale {step}")
        producer.produce(250)
        _run(spark, home, config.name)
        assert fold_mismatches(home, config, producer) == [], f"after {step}"
        verdict = verify_job(home, config.name, sequence="seq")
        assert verdict.ok and verdict.states and verdict.states[0].keys == 30, f"after {step}: {verdict.summary()}"
    # every batch committed exactly one segment; compaction at each run's end folded them all into `current`
    tables = StateTables(home, config.name, config.state[0])
    assert tables.current_as_of() == tables.segment() > 5


def test_the_state_check_names_the_key_a_wrong_row_belongs_to(spark, home: Home) -> None:
    producer = TotalsProducer.on_log(home, "events", 2, keys=8)
    config = totals_job(home, "checked", 2)
    producer.produce(120)
    _run(spark, home, config.name)
    assert verify_job(home, config.name).ok
    # a record applied twice would count one more: plant such a row in `current`, as a bug would have written it
    rows = state_rows(home, config).reset_index()
    victim = rows.iloc[0]
    rows.loc[0, "_records"] = int(victim["_records"]) + 1
    path = layout.current_path(home, config.name, "totals")
    head = DeltaTable(path.path).history(1)[0]  # the compaction's own labels: the segment and batch it is as of
    labels = {k: head[k] for k in (SEGMENT_KEY, BATCH_KEY)}
    table = pa.Table.from_pandas(rows, preserve_index=False).cast(layout.current_schema(config.state[0]))
    write_deltalake(path.path, table, mode="overwrite", commit_properties=CommitProperties(custom_metadata=labels))
    verdict = verify_job(home, config.name)
    assert not verdict.ok
    state = verdict.states[0]
    assert state.wrong == 1 and victim["key"].decode() in state.examples[0], state.summary()
    assert "the state counts" in state.examples[0]


def test_a_record_the_function_fails_on_leaves_its_keys_state_as_it_was(spark, home: Home) -> None:
    producer = TotalsProducer.on_log(home, "events", 1, keys=3)
    config = totals_job(home, "strict", 1)
    producer.produce(30, bad={4: b"{not json", 10: json.dumps({"key": "key-1", "seq": 3}).encode()})
    _run(spark, home, config.name)
    assert fold_mismatches(home, config, producer) == []
    verdict = verify_job(home, config.name)
    assert verdict.ok and verdict.dead_letters == 2, verdict.summary()


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        ("tests.integration.state.functions:too_big", "over the state's limit"),
        ("tests.integration.state.functions:unknown_state", "has no state 'nope'"),
        ("tests.integration.state.functions:wrong_type", "needs a whole number"),
        ("tests.integration.state.functions:another_tasks_key", "not among this task's records"),
    ],
)
def test_a_misused_state_is_a_dead_letter_with_its_reason(spark, home: Home, fn: str, expected: str) -> None:
    producer = TotalsProducer.on_log(home, "events", 1, keys=2)
    state = {"name": "totals", "value_schema": "events BIGINT, amount BIGINT, last_seq BIGINT, note STRING"}
    config = totals_job(home, "misused", 1, process=fn, state={**state, "max_value_bytes": 100})
    producer.produce(6)
    _run(spark, home, config.name)
    dead = read_delta(home.sinks / config.dead_letter_table).to_pandas()
    assert len(dead) == 6 and all(expected in e for e in dead["error"]), dead["error"].tolist()[:2]
    rows = state_rows(home, config)
    assert len(rows) == 0  # nothing applied, not even the bookkeeping
    assert verify_job(home, config.name).ok


def test_the_arrow_form_reads_and_writes_its_keys_in_bulk(spark, home: Home) -> None:
    producer = TotalsProducer.on_log(home, "events", 2, keys=12)
    config = totals_job(home, "bulk", 2, process="tests.integration.state.functions:totals_in_bulk")
    producer.produce(200)
    _run(spark, home, config.name)
    apply_plan(home, plan_next(home, config.name, factor=3), "a non-multiple")
    producer.produce(200)
    _run(spark, home, config.name)
    assert fold_mismatches(home, config, producer) == []
    assert verify_job(home, config.name, sequence="seq").ok


def test_a_running_driver_switches_a_stateful_job_in_place(spark, home: Home) -> None:
    """The live switch: the old query stops at a batch boundary, the new one (another factor) reads the state
    its predecessor committed, in the same Spark application."""
    producer = TotalsProducer.on_log(home, "events", 2, keys=20)
    config = totals_job(home, "live", 1)
    producer.produce(300)
    messages: list[str] = []
    driver = threading.Thread(
        target=lambda: run_job(spark, home, config.name, available_now=False, progress=messages.append)
    )
    driver.start()
    control = ControlPlane(home)
    deadline = time.monotonic() + 150
    try:
        while _latest(control, config.name, 1) < 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        producer.produce(300)  # the old query commits batches while the rescale migrates
        apply_plan(home, plan_next(home, config.name, factor=3), "scale while running")
        while not any("switching" in m for m in messages) and time.monotonic() < deadline:
            time.sleep(0.2)
        producer.produce(300)
        while time.monotonic() < deadline:
            done = _latest(control, config.name, 2) >= 0
            if done and len(read_delta(home.sinks / config.sink_table, columns=["offset"])) >= producer.total:
                break
            time.sleep(0.3)
    finally:
        requests.ask_stop(home, config.name)
        driver.join(timeout=120)
    assert not driver.is_alive()
    assert any("model v2 is active: switching" in m for m in messages), messages
    assert fold_mismatches(home, config, producer) == []
    assert verify_job(home, config.name, sequence="seq").ok


def _latest(control: ControlPlane, job: str, version: int) -> int:
    """The version's latest checkpointed batch, -1 before its first (batch 0 is a batch: not ``or -1``)."""
    latest = control.checkpoints.latest_batch(job, version)
    return -1 if latest is None else latest


def test_a_key_outliving_its_ttl_starts_afresh_and_compaction_drops_it(spark, home: Home) -> None:
    producer = TotalsProducer.on_log(home, "events", 1, keys=4)
    state = {"name": "totals", "value_schema": "events BIGINT, amount BIGINT, last_seq BIGINT", "ttl": "2s"}
    config = totals_job(home, "fleeting", 1, state=state)
    producer.produce(20)  # every key: 5 events
    _run(spark, home, config.name)
    assert sorted(state_rows(home, config)["events"]) == [5, 5, 5, 5]
    time.sleep(3)  # each row outlives its time-to-live, by the batches' (the store's) clock
    producer.system.produce("events", [(b"key-0", json.dumps({"key": "key-0", "seq": 5, "amount": 1}).encode(), None)])
    _run(spark, home, config.name)
    rows = state_rows(home, config)
    assert rows.loc[b"key-0", "events"] == 1 and rows.loc[b"key-0", "_records"] == 1  # a new life
    assert list(rows.index) == [b"key-0"], "compaction dropped the keys whose time-to-live ran out"
    verdict = verify_job(home, config.name)
    assert verdict.ok and verdict.states[0].absent == 3, verdict.summary()
