"""Compaction of a job's control-table files on real Delta: the same answers from fewer files, beside a live writer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.control import ControlPlane
from pipelines.control.compaction import compact_job
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.ssp import SystemStreamPartition
from pipelines.runtime.driver import Heartbeat
from pipelines.storage.home import Home

REPO = Path(__file__).resolve().parents[3]
SSPS = [SystemStreamPartition("deltalog", "events", p, b) for p in range(2) for b in range(2)]

WRITER = """
import sys
from pathlib import Path
from pipelines.control import ControlPlane, Home
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.ssp import SystemStreamPartition as SSP
ssps = [SSP("deltalog", "events", p, b) for p in range(2) for b in range(2)]
control = ControlPlane(Home(Path(sys.argv[1])))
first, count = int(sys.argv[2]), int(sys.argv[3])
print("writing", flush=True)
for b in range(first, first + count):
    control.checkpoints.write("a", 1, CheckpointMap(2, {s: str(b * 10 + i) for i, s in enumerate(ssps)}), b)
    control.metrics.append([{"job": "a", "model_version": 1, "batch_id": b, "metric": "records", "value": b}])
    if b % 5 == 0:  # a start row: an append under an application transaction, numbered by the table
        control.checkpoints.write("a", 1, CheckpointMap(2, {s: str(b) for s in ssps}), -1)
"""


def write_batches(control: ControlPlane, job: str, first: int, count: int) -> None:
    for b in range(first, first + count):
        control.checkpoints.write(job, 1, CheckpointMap(2, {s: str(b * 10 + i) for i, s in enumerate(SSPS)}), b)
        control.metrics.append([{"job": job, "model_version": 1, "batch_id": b, "metric": "records", "value": b}])


def files(home: Home, table: str, job: str) -> int:
    return len(DeltaTable(str(home.root / "control" / table)).file_uris(file_pruning_predicate=[("job", "=", job)]))


def answers(home: Home, job: str) -> tuple[object, ...]:
    control = ControlPlane(home)  # a fresh process's view: nothing cached
    metrics = control.metrics.read(job).drop(columns=["at"])
    return (
        control.checkpoints.latest(job, 1).offsets,
        control.checkpoints.latest_batch(job, 1),
        control.checkpoints.start(job, 1),
        metrics.to_dict("records"),
    )


def test_compaction_rewrites_one_jobs_files_into_few_and_every_answer_stays_the_same(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    control = ControlPlane(home)
    control.checkpoints.write("a", 1, CheckpointMap(2, dict.fromkeys(SSPS, "0")), -1)
    write_batches(control, "a", 0, 60)
    write_batches(control, "b", 0, 5)
    before_a, before_b = answers(home, "a"), answers(home, "b")
    assert files(home, "checkpoints", "a") == 61 and files(home, "metrics", "a") == 60

    done = {c.table: c for c in compact_job(home, "a", min_files=50)}

    assert (done["checkpoints"].files_before, done["checkpoints"].files_after) == (61, 1)
    assert (done["metrics"].files_before, done["metrics"].files_after) == (60, 1)
    assert files(home, "checkpoints", "a") == 1 and files(home, "checkpoints", "b") == 5, "job b's files untouched"
    assert answers(home, "a") == before_a and answers(home, "b") == before_b
    assert done["checkpoints"].rows_deleted == 59 * 4, "each bucket's 59 superseded batch rows"
    assert ControlPlane(home).checkpoints.table.read("a").num_rows == 4 + 4, "the start rows and the latest ones"
    assert ControlPlane(home).checkpoints.table.read("b").num_rows == 5 * 4, "job b's rows untouched"
    assert done["metrics"].rows_deleted == 0, "metrics keep their history"
    write_batches(control, "a", 60, 1)  # the job writes on, through the handle it held across the compaction
    assert ControlPlane(home).checkpoints.latest_batch("a", 1) == 60


def test_a_table_with_fewer_files_than_the_threshold_is_left_alone(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    write_batches(ControlPlane(home), "a", 0, 5)
    version = DeltaTable(str(home.root / "control" / "checkpoints")).version()
    done = {c.table: c for c in compact_job(home, "a", min_files=50)}
    assert (done["checkpoints"].files_before, done["checkpoints"].files_after) == (5, 5)
    assert DeltaTable(str(home.root / "control" / "checkpoints")).version() == version, "no commit at all"
    assert compact_job(home, "nobody") == [], "a job with no rows has nothing to compact"


def test_compaction_beside_a_writing_driver_loses_and_reorders_nothing(tmp_path: Path) -> None:
    """Each round deletes superseded checkpoint rows, which fails the writer's concurrent appends' conflict check
    (delta-rs counts an append as a read of the whole table): the writer's appends are retried, none is lost."""
    home = Home(tmp_path / "home")
    control = ControlPlane(home)
    control.checkpoints.write("a", 1, CheckpointMap(2, dict.fromkeys(SSPS, "0")), -1)
    write_batches(control, "a", 0, 20)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(home.root), "20", "80"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        rounds = 0
        while writer.poll() is None:
            compact_job(home, "a", min_files=5)
            rounds += 1
            time.sleep(0.05)
        assert writer.wait() == 0
    finally:
        writer.kill()
    assert rounds >= 3, "the compactions ran while the writer wrote"
    # min_files=1: the last round may have compacted the writer's last batches into one file before it stopped
    compact_job(home, "a", min_files=1)
    fresh = ControlPlane(home)
    assert fresh.checkpoints.latest_batch("a", 1) == 99
    assert fresh.checkpoints.latest("a", 1).offsets == {s: str(99 * 10 + i) for i, s in enumerate(SSPS)}
    batches = fresh.checkpoints.table.read("a", [("batch_id", ">=", 0)]).column("batch_id").to_pylist()
    assert batches == [99] * len(SSPS), "the superseded rows deleted while the writer wrote, its last batch's kept"
    seqs = fresh.checkpoints.table.read("a", [("batch_id", "=", -1)]).column("seq").to_pylist()
    assert sorted(set(seqs)) == list(range(1, 18)), "the start rows' numbers: 1 for the first, one per later write"
    assert sorted(fresh.metrics.read("a")["batch_id"]) == list(range(100))
    assert files(home, "checkpoints", "a") <= 2


def test_a_drivers_heartbeat_compacts_its_jobs_tables_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = Home(tmp_path / "home")
    control = ControlPlane(home)
    write_batches(control, "a", 0, 55)
    Heartbeat(control, "a").compact()
    out = capsys.readouterr().out
    assert "[a] compacted control tables: checkpoints 55 -> 1 files (216 rows deleted), metrics 55 -> 1 files" in out
    assert files(home, "metrics", "a") == 1


def test_the_adjunct_stores_checkpoint_rows_are_compacted_too(tmp_path: Path) -> None:
    """A job with adjunct stores adds a file of store rows with every batch (``adjunct.checkpoints``)."""
    from datetime import UTC, datetime

    from pipelines.control.store_checkpoints import TABLE, append_store_checkpoints
    from pipelines.deltaio import read_delta

    home = Home(tmp_path / "home")
    at = datetime(2026, 11, 27, tzinfo=UTC)
    for b in range(52):
        row = {"job": "a", "store": "customers", "system": "deltalog", "stream": "customers", "partition": 0}
        row |= {"position": str(b), "seq": b, "generation": 0, "incarnation": "i1", "batch_id": b, "written_at": at}
        append_store_checkpoints(home, [row])
    rows = sorted(read_delta(home.control_table(TABLE)).to_pylist(), key=lambda r: r["batch_id"])
    done = {c.table: c for c in compact_job(home, "a")}
    assert (done[TABLE].files_before, done[TABLE].files_after) == (52, 1)
    assert sorted(read_delta(home.control_table(TABLE)).to_pylist(), key=lambda r: r["batch_id"]) == rows


def test_pruning_keeps_each_buckets_latest_row_the_start_rows_and_replays_across_versions(tmp_path: Path) -> None:
    """Partial maps (a batch writes only the buckets it advanced), an idle bucket, a replayed batch, two versions."""
    from pipelines.control.checkpoints import prune_superseded

    home = Home(tmp_path / "home")
    control = ControlPlane(home)
    busy, idle = SSPS[:3], SSPS[3]
    for version in (1, 2):
        control.checkpoints.write("a", version, CheckpointMap(2, dict.fromkeys(SSPS, "0")), -1)
        control.checkpoints.write("a", version, CheckpointMap(2, {idle: "5"}), 0)  # then idle for good
        for b in range(1, 8):
            control.checkpoints.write("a", version, CheckpointMap(2, {s: f"{b}{i}" for i, s in enumerate(busy)}), b)
        control.checkpoints.write("a", version, CheckpointMap(2, {s: f"7{i}" for i, s in enumerate(busy)}), 7)
    control.checkpoints.write("a", 2, CheckpointMap(2, dict.fromkeys(SSPS, "1")), -1)  # a carry-forward rewrite
    before = [answers(home, "a"), (control.checkpoints.latest("a", 2), control.checkpoints.start("a", 2))]

    dt = DeltaTable(str(home.root / "control" / "checkpoints"))
    assert prune_superseded(dt, "a") == 2 * 6 * 3, "per version: batches 1-6 of the three busy buckets"
    assert prune_superseded(DeltaTable(str(home.root / "control" / "checkpoints")), "a") == 0, "nothing left to do"

    fresh = ControlPlane(home)
    assert [answers(home, "a"), (fresh.checkpoints.latest("a", 2), fresh.checkpoints.start("a", 2))] == before
    rows = fresh.checkpoints.table.read("a", [("model_version", "=", 1)]).to_pylist()
    kept = sorted((r["batch_id"], r["partition"], r["key_bucket"]) for r in rows)
    assert kept == sorted(
        [(-1, s.partition, s.key_bucket) for s in SSPS]
        + [(0, 1, 1)]
        + [(7, s.partition, s.key_bucket) for s in busy for _ in range(2)]
    ), kept
    assert fresh.checkpoints.latest("a", 1).offsets[idle] == "5", "the idle bucket keeps its only batch row"
    write_batches(fresh, "a", 8, 1)  # the start sequence goes on from the rows kept
    fresh.checkpoints.write("a", 2, CheckpointMap(2, dict.fromkeys(SSPS, "2")), -1)
    seqs = fresh.checkpoints.table.read("a", [("model_version", "=", 2), ("batch_id", "=", -1)]).column("seq")
    assert sorted(set(seqs.to_pylist())) == [1, 2, 3]


def test_metric_rows_past_the_jobs_retention_are_deleted_the_rest_and_other_jobs_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The retention is the job's (``metrics_retention_hours``, 168 by default), on the store's clock; a table with
    fewer files than compaction's threshold is expired all the same."""
    from datetime import timedelta

    import yaml

    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job
    from pipelines.systems.deltalog import DeltaLog

    home = Home(tmp_path / "home")
    DeltaLog(home.streams).create("events", 2)
    raw = yaml.safe_load((REPO / "include/jobs/enrichment.yaml").read_text())
    create_job(home, JobConfig.from_dict({**raw, "name": "short", "metrics_retention_hours": 2}))
    control = ControlPlane(home)
    now = control.clock.now()
    for job in ("short", "other"):  # "other" has no model: the default retention, a week
        control.metrics.append(
            {"job": job, "model_version": 1, "batch_id": b, "metric": "records", "value": b, "at": now - age}
            for b, age in enumerate((timedelta(hours=200), timedelta(hours=3), timedelta(minutes=5)))
        )

    Heartbeat(control, "short").compact()  # the driver's round
    assert "[short] compacted control tables: metrics 1 -> 1 files (2 rows deleted)" in capsys.readouterr().out, (
        "200 h and 3 h old, past 2 hours"
    )
    version = DeltaTable(str(home.root / "control" / "metrics")).version()
    assert {c.table: c for c in compact_job(home, "short")}["metrics"].rows_deleted == 0, "nothing left to expire"
    assert DeltaTable(str(home.root / "control" / "metrics")).version() == version, "and no commit"
    assert {c.table: c for c in compact_job(home, "other")}["metrics"].rows_deleted == 1, "only the 200 h old row"
    fresh = ControlPlane(home).metrics
    assert list(fresh.read("short")["batch_id"]) == [2]
    assert list(fresh.read("other")["batch_id"]) == [1, 2]


def test_store_checkpoint_rows_no_restart_can_pick_are_deleted_and_every_reading_stays(tmp_path: Path) -> None:
    """Two incarnations of a store, a batch that saw a lower version after a higher one, and the answer compared
    under every numbering of the incarnations (``latest_store_checkpoints``): before and after the deletion."""
    from datetime import UTC, datetime, timedelta

    from pipelines.adjunct.checkpoints import latest_store_checkpoints
    from pipelines.control.store_checkpoints import TABLE, append_store_checkpoints
    from pipelines.deltaio import read_delta

    home = Home(tmp_path / "home")
    t0 = datetime(2026, 11, 27, tzinfo=UTC)

    def batch(b: int, incarnation: str, seq: int, job: str = "a") -> None:
        at = t0 + timedelta(seconds=b, microseconds=7)
        append_store_checkpoints(
            home,
            [
                {"job": job, "store": "customers", "system": "deltalog", "stream": "customers", "partition": p}
                | {"position": f"{b}.{p}", "seq": seq, "generation": 0, "incarnation": incarnation}
                | {"batch_id": b, "written_at": at}
                for p in range(2)
            ],
        )

    for b in range(30):
        batch(b, "i1", seq=b // 3)
    batch(30, "i1", seq=5)  # a batch that saw a lower version than batch 29 (seq 9), written after it
    for b in range(31, 60):
        batch(b, "i2", seq=b // 4)
    batch(0, "i1", seq=0, job="b")
    numberings = [{}, {"customers": {"i1": 1, "i2": 2}}, {"customers": {"i2": 1}}, {"customers": {"i1": 2, "i2": 1}}]

    def readings(job: str) -> list[object]:
        rows = read_delta(home.control_table(TABLE), [("job", "=", job)])
        return [latest_store_checkpoints(rows, numbers) for numbers in numberings]

    before, before_b = readings("a"), readings("b")
    done = {c.table: c for c in compact_job(home, "a")}
    kept = read_delta(home.control_table(TABLE), [("job", "=", "a")]).to_pylist()
    assert readings("a") == before and readings("b") == before_b
    assert sorted({(r["incarnation"], r["batch_id"]) for r in kept}) == [("i1", 29), ("i1", 30), ("i2", 59)]
    assert done[TABLE].rows_deleted == 2 * 60 - len(kept), "every other row of job a (60 batches of 2), none of b"
