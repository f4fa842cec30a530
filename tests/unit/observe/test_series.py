"""The aggregation of metric rows into batches, series and markers: known rows in, exact figures out."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.groupers import plan_job_model
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.observe.series import batches, charts, fault_notes, marker, markers, outage_markers
from pipelines.observe.synthetic import run_rows

P0 = SystemStreamPartition("deltalog", "events", 0).wire()
P1 = SystemStreamPartition("deltalog", "events", 1).wire()


def row(version: int, batch: int, task: str | None, metric: str, value: float, at: float) -> dict:
    return {"model_version": version, "batch_id": batch, "task": task, "metric": metric, "value": value, "at": at}


def two_batches() -> list[dict]:
    """Batch 0 at t=100 (2 s long) and batch 1 at t=110 (no duration row): two tasks, two partitions."""
    rows = []
    for batch, at, counts in ((0, 100.0, (30, 10)), (1, 110.0, (50, 50))):
        for task, n in zip(("Partition 0", "Partition 1"), counts, strict=True):
            rows += [
                row(1, batch, task, "records_in", n, at),
                row(1, batch, task, "records_out", n - 1, at),
                row(1, batch, task, "records_fetched", n, at),
            ]
        rows += [row(1, batch, P0, "lag_records", 7 * (batch + 1), at), row(1, batch, P1, "lag_records", 3, at)]
        rows.append(row(1, batch, None, "task_count", 2, at))
    rows.append(row(1, 0, None, "batch_duration_s", 2.0, 100.5))  # the driver writes it just after the commit
    rows.append(row(1, 3, None, "heartbeat", 999.0, 120.0))  # lifecycle rows are not batches
    return rows


def test_batches_sum_tasks_and_compute_rates_from_duration_or_the_previous_batch() -> None:
    first, second = batches(two_batches())
    assert (first.batch, first.records_in, first.records_out, first.records_fetched) == (0, 40, 38, 40)
    assert first.at == 100.0 and first.duration_s == 2.0 and first.rate_in == 20.0 and first.rate_out == 19.0
    assert first.lag_records == 10 and first.lag_s is None and first.tasks == 2
    assert second.duration_s is None and second.elapsed_s == 10.0  # no duration row: since the previous batch
    assert second.rate_in == 10.0 and second.lag_records == 17


def test_the_first_batch_of_a_version_without_a_duration_has_no_rate() -> None:
    rows = [r for r in two_batches() if r["metric"] != "batch_duration_s"]
    first, _ = batches(rows)
    assert first.rate_in is None


def test_lag_is_time_where_no_partition_could_be_counted_and_unknown_without_either() -> None:
    rows = [r for r in two_batches() if r["metric"] != "lag_records"]
    by_key = {c.key: c for c in charts(batches(rows))}
    assert by_key["lag"].series == () and "unknown" in (by_key["lag"].note or "")
    assert "time_lag" not in by_key
    rows.append(row(1, 1, "Partition 0", "input.millis_behind_latest", 2500, 110.0))
    rows.append(row(1, 1, "Partition 1", "input.millis_behind_latest", 400, 110.0))
    points = batches(rows)
    assert points[1].lag_s == 2.5 and points[1].lag_records is None
    by_key = {c.key: c for c in charts(points)}
    assert by_key["time_lag"].series[0].points == ((110.0, 2.5),)


def test_charts_hold_the_points_of_every_batch() -> None:
    by_key = {c.key: c for c in charts(batches(two_batches()))}
    throughput = {s.name: s.points for s in by_key["throughput"].series}
    assert throughput["in"] == ((100.0, 20.0), (110.0, 10.0))
    fetch = {s.name: s.points for s in by_key["fetch"].series}
    assert fetch["fetched"] == ((100.0, 40.0), (110.0, 100.0)) and fetch["needed"] == fetch["fetched"]
    assert by_key["lag"].series[0].points == ((100.0, 10.0), (110.0, 17.0))
    assert by_key["duration"].series[0].points == ((100.0, 2.0),)


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False), st.floats(min_value=0.0, max_value=1.0))
def test_a_replayed_batch_or_any_row_order_never_changes_the_figures(rnd: random.Random, replayed: float) -> None:
    """Spark replays a batch whose commit it did not record: its rows come again, later; the latest counts."""
    model = plan_job_model("j", 1, {SystemStream("deltalog", "events"): 2}, factor=2)
    rows = run_rows(model, batches=6, start=1000.0, every_s=5.0, records_per_batch=400, lag=50, seed=3)
    expected = batches(rows)
    again = [dict(r) for r in rows if rnd.random() < replayed]  # the replay commits the same values again, later
    for r in again:
        r["at"] = r["at"].timestamp() + 0.25
    mixed = rows + again
    rnd.shuffle(mixed)
    got = batches(mixed)
    assert [(p.version, p.batch, p.records_in, p.records_fetched, p.lag_records, p.duration_s) for p in got] == [
        (p.version, p.batch, p.records_in, p.records_fetched, p.lag_records, p.duration_s) for p in expected
    ]


def test_batch_ids_restart_with_each_model_version() -> None:
    rows = [row(1, 0, "t", "records_in", 5, 10.0), row(2, 0, "t", "records_in", 9, 20.0)]
    assert [(p.version, p.batch, p.records_in) for p in batches(rows)] == [(1, 0, 5), (2, 0, 9)]


def event(kind: str = "rescale", **details: object) -> dict:
    return {
        "event_id": "e1",
        "kind": kind,
        "status": "verified",
        "started_at": 50.0,
        "finished_at": 58.0,
        "from_factor": 1,
        "to_factor": 4,
        "details": details,
    }


def test_markers_carry_the_factor_step_and_the_downtime() -> None:
    m = marker(event(downtime_s=2.345, mode="in-place"))
    assert (m.kind, m.at, m.until, m.from_factor, m.to_factor, m.downtime_s) == ("rescale", 50.0, 58.0, 1, 4, 2.345)
    assert m.label == "rescale ×1→×4 · down 2.3 s"
    cold = marker(event(mode="cold"))
    assert cold.downtime_s is None and "cold" in cold.label


def test_partition_changes_are_expansions_or_kinesis_reshards() -> None:
    expansion = marker(event("partition expansion", partitions={"deltalog.events": 4}))
    assert expansion.kind == "expansion" and expansion.label == "expansion → 4 partitions"
    reshard = marker(event("partition expansion", partitions={"kinesis.clicks": 3}, downtime_s=1.0))
    assert reshard.kind == "reshard" and reshard.label == "reshard → 3 partitions · down 1.0 s"


def test_markers_keep_the_events_that_overlap_the_window() -> None:
    old = {**event(), "event_id": "old", "started_at": 10.0, "finished_at": 20.0}
    running = {**event(), "event_id": "running", "started_at": 15.0, "finished_at": None}
    recent = {**event(), "event_id": "recent", "started_at": 40.0}
    assert [m.event_id for m in markers([recent, old, running], since=30.0)] == ["running", "recent"]


def test_an_input_outage_is_a_marker_from_when_it_began_to_when_the_input_answered() -> None:
    rows = [
        row(2, -1, None, "input_unavailable_s", 0.0, 1000.0),  # first failure
        row(2, -1, None, "input_unavailable_s", 30.5, 1030.5),  # reported again 30 s later
        row(2, -1, None, "input_recovered_s", 42.0, 1042.0),
        row(2, -1, None, "input_unavailable_s", 3.0, 1103.0),  # a second outage, still on
        row(2, 7, "t", "records_in", 5.0, 1050.0),  # not an outage row
    ]
    ended, still = outage_markers(rows)
    assert (ended.kind, ended.at, ended.until, ended.downtime_s) == ("outage", 1000.0, 1042.0, 42.0)
    assert ended.label == "input unavailable · 42.0 s"
    assert (still.at, still.until, still.status) == (1100.0, None, "open")
    assert outage_markers(rows[-1:]) == [], "rows of other metrics are no outage"


def test_a_batch_that_lost_tasks_and_an_executor_says_so_and_gets_a_faults_plot() -> None:
    clean = charts(batches(two_batches()))
    assert "faults" not in {c.key for c in clean}  # no plot while nothing was lost
    rows = [*two_batches(), row(1, 1, None, "tasks_failed", 3, 110.2), row(1, 1, None, "executors_lost", 1, 110.2)]
    first, second = batches(rows)
    assert (first.tasks_failed, first.executors_lost, first.faults) == (0, 0, None)
    assert (second.tasks_failed, second.executors_lost) == (3, 1)
    assert second.to_dict()["faults"] == "batch 1: 3 tasks retried, 1 executor lost"
    assert fault_notes([first, second]) == ["v1 batch 1: 3 tasks retried, 1 executor lost"]
    plot = {c.key: c for c in charts([first, second])}["faults"]
    assert {s.name: [v for _, v in s.points] for s in plot.series} == {
        "tasks retried": [0.0, 3.0],
        "executors lost": [0.0, 1.0],
    }
