"""The engine end to end on real Spark and Delta: exactly once, per-key order, dead letters, restarts.

A driver killed mid-run or between its sink commit and its checkpoints is the fault matrix's (``tests/faults``):
each kill point is tested once in the suite, there.
"""

from __future__ import annotations

import math
import time

import pytest

from pipelines.control import ControlPlane
from pipelines.core.ssp import SystemStreamPartition
from pipelines.runtime import requests
from pipelines.runtime.driver import batch_budget, run_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from .jobs import SeqProducer, dead_letters, job, misrouted, order_violations, produce, sink

RECORDS, KEYS = 640, 64


def test_factors_1_and_4_give_the_same_rows_exactly_once_in_key_order(spark, home: Home) -> None:
    bad = produce(home, "events", RECORDS, KEYS, bad_every=97)
    outputs = {}
    for factor in (1, 4):
        config = job(home, f"f{factor}", factor, max_records=100)  # 100 per batch at factor 1, 400 at factor 4
        said: list[str] = []
        run_job(spark, home, config.name, available_now=True, progress=said.append)
        rows = sink(home, config)
        # Records never enter the JVM: the source hands Spark one row per virtual task, the writer reads.
        spark_rows = [int(m.split(": ")[1].split()[0]) for m in said if "virtual tasks read" in m]
        assert spark_rows and all(0 < n <= 2 * factor for n in spark_rows), said
        assert len(rows) == RECORDS - bad, f"factor {factor}: {len(rows)} rows for {RECORDS - bad} good records"
        assert not rows.duplicated(["partition", "offset"]).any()
        assert order_violations(rows) == []
        assert misrouted(rows, factor).empty
        assert rows["virtual_task"].nunique() == 2 * factor
        budget = batch_budget(100, factor)
        assert rows["batch_id"].nunique() >= math.ceil(RECORDS / budget) > 1, "admission control splits the input"
        dead = dead_letters(home, config)
        assert len(dead) == bad
        assert dead["error"].str.contains("JSONDecodeError").all()
        assert (dead["value"] == b"{not json").all()
        outputs[factor] = set(zip(rows["partition"], rows["offset"], rows["event_key"], rows["seq"], strict=True))
        checkpoints = ControlPlane(home).checkpoints.latest(config.name, 1)
        ends = DeltaLog(home.streams).end_offsets("events")
        assert {ssp: int(off) for ssp, off in checkpoints.offsets.items()} == {
            ssp: ends[ssp.partition] for ssp in checkpoints.offsets
        }, "every key bucket's checkpoint ends at its partition's end, even buckets without records"
        metrics = ControlPlane(home).metrics.read(config.name)
        per_task = metrics[metrics["metric"] == "records_in"].groupby("task")["value"].sum()
        assert per_task.sum() == RECORDS and len(per_task) == 2 * factor
        lag = metrics[metrics["metric"] == "lag_records"]
        assert set(lag["task"]) == {SystemStreamPartition("deltalog", "events", p).wire() for p in (0, 1)}
        assert lag.groupby("task")["value"].last().eq(0).all(), "caught up at the end of an available-now run"
        assert set(metrics[metrics["metric"] == "task_count"]["value"]) == {2.0 * factor}
        assert {"key_hash_s", "process_s", "read_s", "records_out", "dead_letters"} <= set(metrics["metric"])
    assert outputs[1] == outputs[4]


def test_a_restart_continues_from_the_checkpoints(spark, home: Home) -> None:
    produce(home, "events", 200, 10)
    config = job(home, "resume", 2)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    produce(home, "events", 200, 10)  # seqs restart per call, so compare counts and offsets only
    # what a driver killed while it stopped at a batch boundary leaves (a second Ctrl-C, a kill after a stop that
    # took too long): its source's drain request, which would admit no record of v1 ever again
    requests.drain(home, config.name, 1)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rows = sink(home, config)
    assert len(rows) == 400
    assert not rows.duplicated(["partition", "offset"]).any()
    assert not requests.draining(home, config.name, 1)


def test_a_stream_deleted_and_created_again_under_a_job_stops_it_instead_of_skipping_the_new_records(
    spark, home: Home
) -> None:
    """The job's checkpoints stand at each partition's end (about 40). The stream's table restored to its first
    version (the same table, emptied) ends below them: read on, the job would wait there and skip what came back
    below them, without a word; it stops instead, naming the partition, its end and the checkpoint, as Spark's
    ``failOnDataLoss`` does. The stream then deleted and made again, and grown past the checkpoints, where its ends
    look like the old stream's: its table id tells them apart. Each time nothing is committed."""
    import shutil

    from deltalake import DeltaTable

    from pipelines.errors import InputRewoundError

    produce(home, "events", 80, 8)
    config = job(home, "replaced", 2)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    control = ControlPlane(home)
    batches = control.checkpoints.latest_batch(config.name, 1)
    ends = DeltaLog(home.streams).end_offsets("events")
    assert min(ends.values()) > 20, ends

    path = DeltaLog(home.streams).path("events")
    DeltaTable(path).restore(0)  # the stream as it was created: no record, the same table
    with pytest.raises(InputRewoundError, match=r"stream 'events' partition \d ends at 0, before the job's check"):
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert control.checkpoints.latest_batch(config.name, 1) == batches, "no batch was committed"

    shutil.rmtree(path)
    produce(home, "events", 400, 4)  # made again, 100 records a partition: past every checkpoint
    assert min(DeltaLog(home.streams).end_offsets("events").values()) > max(ends.values())
    with pytest.raises(InputRewoundError, match=r"input deltalog\.events of job 'replaced' is not the stream model v1"):
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert control.checkpoints.latest_batch(config.name, 1) == batches, "no batch was committed"
    assert len(sink(home, config)) == 80


def test_a_job_created_with_start_latest_reads_what_comes_after_and_new_partitions_from_their_start(
    spark, home: Home
) -> None:
    """``start: latest`` on the embedded log: the history before ``job create`` is not the job's, the records after
    it are read once and verify, and a partition added later starts at its earliest (as Flink's Kafka source)."""
    from pipelines.planning import plan_next
    from pipelines.quality.verify import verify_job

    produce(home, "events", 100, 10)  # history
    log = DeltaLog(home.streams)
    ends = log.end_offsets("events")
    config = job(home, "fromnow", 2, start="latest")
    assert {(s.partition, o) for s, o in ControlPlane(home).checkpoints.start("fromnow", 1).items()} == {
        (p, str(e)) for p, e in ends.items()
    }
    produce(home, "events", 40, 10)  # a fresh per-key seq: the order check sees only these
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rows = sink(home, config)
    assert len(rows) == 40 and all(int(o) >= ends[p] for p, o in zip(rows["partition"], rows["offset"], strict=True))
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok and verdict.records_expected == 40, verdict.summary()
    log.expand("events", 4)
    start = plan_next(home, "fromnow").start.offsets
    assert {o for s, o in start.items() if s.partition in (2, 3)} == {"0"}, "new partitions from their earliest"
    assert {o for s, o in start.items() if s.partition in (0, 1)} == {
        str(log.end_offsets("events")[p]) for p in (0, 1)
    }, "the old ones where the job stands"


def test_a_job_created_with_a_start_time_reads_from_each_partitions_first_record_at_or_after_it(
    spark, home: Home
) -> None:
    """``start: <time>`` on the embedded log: records written before the time are not the job's, those after it
    (before and after ``job create``) are read once, in order, and verify; a time still to come is refused at
    ``job create`` with nothing created."""
    from datetime import UTC, datetime, timedelta

    from pipelines.errors import ConfigError
    from pipelines.quality.verify import verify_job

    log = DeltaLog(home.streams)
    events = SeqProducer(log, "events", 2, 10)  # one per-key seq across the calls: the order check spans them
    events.produce(100)  # before the time
    time.sleep(0.02)
    mark = datetime.now(UTC)
    time.sleep(0.02)
    firsts = log.end_offsets("events")
    events.produce(30)  # after the time, before the job exists
    with pytest.raises(ConfigError, match="in the future"):
        job(home, "later", 2, start=(mark + timedelta(hours=1)).isoformat())
    assert "later" not in ControlPlane(home).job_models.jobs(), "a refused create leaves nothing"
    config = job(home, "fromthen", 2, start=mark.isoformat())
    assert {(s.partition, o) for s, o in ControlPlane(home).checkpoints.start("fromthen", 1).items()} == {
        (p, str(e)) for p, e in firsts.items()
    }
    events.produce(40)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rows = sink(home, config)
    assert len(rows) == 70 and all(int(o) >= firsts[p] for p, o in zip(rows["partition"], rows["offset"], strict=True))
    assert order_violations(rows) == []
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok and verdict.records_expected == 70, verdict.summary()


def test_a_trim_keeps_what_the_job_has_not_read_a_forced_one_stops_it_until_skipped_and_compaction_changes_nothing(
    spark, home: Home
) -> None:
    """``stream trim``, the embedded log's retention: by default only what the job has read goes; records taken
    from it anyway (``--lose-unread``) stop its next run, naming the partition and offset, with no batch committed,
    until ``job skip-lost`` moves it past them; the job then reads the rest once and verifies."""
    from pipelines.errors import StreamError
    from pipelines.operations.lost import skip_lost
    from pipelines.operations.retention import trim_stream
    from pipelines.quality.verify import verify_job

    log = DeltaLog(home.streams)
    events = SeqProducer(log, "events", 2, 10)
    for _ in range(3):
        events.produce(40)  # three files per partition
    config = job(home, "trimmed", 2)
    time.sleep(0.02)
    now = int(time.time() * 1000)
    kept, readers = trim_stream(home, "events", now)
    assert kept.files == 0 and [r.name for r in readers] == ["trimmed"], "the job has read nothing yet"

    lost, _ = trim_stream(home, "events", now, lose_unread=True)
    assert lost.records == 80 and all(p.stop == "last file" for p in lost.partitions)
    with pytest.raises(StreamError, match=r"partition \d no longer holds offset 0: it starts at \d+ \(retention"):
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    control = ControlPlane(home)
    assert control.checkpoints.latest_batch(config.name, 1) == -1, "no batch was committed"
    gaps, version = skip_lost(home, config.name)
    assert version == 2 and sum(g.records or 0 for g in gaps) == 80
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert len(sink(home, config)) == 40

    read_to = log.end_offsets("events")
    events.produce(40)
    time.sleep(0.02)
    done, _ = trim_stream(home, "events", int(time.time() * 1000))
    assert {p.partition: p.earliest for p in done.partitions} == read_to, "what the job read went, the rest stayed"
    events.produce(40)
    merged = log.compact("events", 64 << 20, 60_000)  # the job then reads the new records from merged files
    assert set(merged.files_after.values()) == {1} and merged.runs, merged
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rows = sink(home, config)
    assert len(rows) == 120 and not rows.duplicated(["partition", "offset"]).any()
    assert order_violations(rows) == []
    verdict = verify_job(home, config.name, sequence="seq")
    assert verdict.ok and (verdict.records_expected, verdict.rows, verdict.gone) == (80, 120, 40), verdict.summary()
    assert "40 of the rows are of records the input no longer holds" in verdict.summary()
