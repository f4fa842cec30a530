"""The per-task table: slowest first, a hot key bucket flagged, lag and hold-backs per task."""

from __future__ import annotations

from pipelines.core.groupers import plan_job_model
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.observe.series import batches
from pipelines.observe.synthetic import run_rows
from pipelines.observe.tasks import task_table

EVENTS = SystemStream("deltalog", "events")


def test_a_hot_bucket_is_flagged_and_listed_first() -> None:
    model = plan_job_model("j", 2, {EVENTS: 2}, factor=4)
    hot = "Partition 1-2-4"
    rows = run_rows(model, batches=8, start=0.0, every_s=2.0, records_per_batch=1100, lag=80, hot_task=hot)
    checkpoints = {s: "42" for s in model.ssp_to_task()}
    table = task_table(model, checkpoints, rows, batches(rows))
    assert table[0].task == hot
    assert [r.task for r in table if r.skewed] == [hot]
    first = table[0]
    # 4 shares of 11 over the last 5 batches; the others 1 share each
    assert first.records == 5 * (1100 * 4 // 11) and table[1].records == 5 * (1100 // 11)
    assert abs(sum(r.share or 0 for r in table) - 1.0) < 0.01
    assert round(first.skew or 0, 2) == round(first.share * 8, 2)  # type: ignore[operator]
    assert first.key_bucket == 2 and first.inputs == ("deltalog.events[1]",)
    assert first.checkpoints == {"deltalog.events[1]": "42"}
    assert first.lag_records == 0  # the synthetic lag shrinks to 0 by the last batch
    assert first.rate is not None and first.rate > table[1].rate  # type: ignore[operator]


def test_lag_is_the_partitions_and_holds_are_named() -> None:
    model = plan_job_model("j", 1, {EVENTS: 2}, factor=2)
    rows = run_rows(model, batches=2, start=0.0, every_s=1.0, records_per_batch=100, lag=30)
    # the last batch's lag is 0: write a later one with a known lag for partition 1
    for r in rows:
        if r["metric"] == "lag_records" and r["batch_id"] == 1 and '"events",1' in r["task"]:
            r["value"] = 12.0
    held = {SystemStreamPartition("deltalog", "events", 1): "held back: expansion"}
    table = {r.task: r for r in task_table(model, {}, rows, batches(rows), held)}
    assert table["Partition 1-0-2"].lag_records == 12 and table["Partition 1-1-2"].lag_records == 12
    assert table["Partition 0-0-2"].lag_records == 0
    assert table["Partition 1-1-2"].held == "deltalog.events[1]: held back: expansion"
    assert table["Partition 0-1-2"].held is None


def test_few_records_flag_nothing() -> None:
    model = plan_job_model("j", 1, {EVENTS: 1}, factor=4)
    rows = run_rows(model, batches=1, start=0.0, every_s=1.0, records_per_batch=12, hot_task="Partition 0-0-4")
    assert not any(r.skewed for r in task_table(model, {}, rows, batches(rows)))


def test_tasks_of_an_older_version_are_not_mixed_in() -> None:
    old = plan_job_model("j", 1, {EVENTS: 1}, factor=1)
    new = plan_job_model("j", 2, {EVENTS: 1}, factor=2)
    rows = run_rows(old, batches=3, start=0.0, every_s=1.0, records_per_batch=500)
    rows += run_rows(new, batches=1, start=10.0, every_s=1.0, records_per_batch=40)
    table = task_table(new, {}, rows, batches(rows))
    assert sorted(r.task for r in table) == ["Partition 0-0-2", "Partition 0-1-2"]
    assert sum(r.records for r in table) == 40
