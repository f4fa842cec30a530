"""Scale evaluation on real Delta tables: metrics shaped as the runtime's sink writes them, decisions recorded.

No Spark: the job is registered on an embedded-log stream and its batches'
metric rows are appended the way ``ElasticDeltaWriter.commit`` appends them
(one commit per batch, every row of it with the same ``at``), with the commit
times chosen by the test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipelines.control import ControlPlane
from pipelines.control.decisions import read_decisions, record_decision
from pipelines.control.scaling_events import ScalingEvent
from pipelines.core.autosize import DOWN, HOLD, UP, AutosizeConfig, Decision, Observation
from pipelines.core.model import JobModel
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig
from pipelines.operations.autosize import autosize_config, evaluate, observe
from pipelines.operations.jobs import create_job
from pipelines.operations.scaling.start import apply_plan
from pipelines.planning import plan_next
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog


def rescale(home: Home, job: str, factor: object, reason: str = "test") -> JobModel:
    """Plan, save and activate a new factor in one go (no driver to coordinate), as a scaling event."""
    version = plan_next(home, job, factor=factor)
    apply_plan(home, version, reason)
    return version.model


JOB = "orders"
STREAM = "events"
PARTITIONS = 2
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
WALL_S = 2.0


def make_job(home: Home, factor: int, autosize: dict[str, Any] | None = None) -> JobConfig:
    log = DeltaLog(home.streams)
    if STREAM not in log.list_streams():
        log.create(STREAM, PARTITIONS)
    raw: dict[str, Any] = {
        "name": JOB,
        "inputs": [{"system": "deltalog", "stream": STREAM}],
        "elasticity_factor": factor,
        "process": "pipelines.demo.enrich:process",
        "output_schema": "event_key STRING, seq BIGINT",
        "sink": {"table": f"{JOB}_out"},
    }
    if autosize is not None:
        raw["autosize"] = autosize
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    return config


@dataclass
class Load:
    """One batch's figures: per task processing seconds and records, per partition lag."""

    process_s: float
    records: int
    lag: float
    first_task_s: float | None = None  # the first task's processing seconds, if it differs (a skewed bucket)


def write_batches(
    home: Home,
    loads: Iterable[Load],
    *,
    first_batch: int = 0,
    start: datetime = T0,
    wall_s: float = WALL_S,
) -> datetime:
    """Commit one batch per load, ``wall_s`` apart, as the sink does; returns the last commit time."""
    control = ControlPlane(home)
    model = control.job_models.active(JOB)
    tasks = [t.task_name.name for t in model.tasks()]
    at = start
    for i, load in enumerate(loads):
        batch = first_batch + i
        at = start + timedelta(seconds=wall_s * i)
        rows = [*sink_rows(model.version, batch, tasks, load), *job_rows(model.version, batch, len(tasks))]
        control.metrics.append([{**r, "at": at} for r in rows])
    return at


def sink_rows(version: int, batch: int, tasks: list[str], load: Load) -> list[dict[str, Any]]:
    """The per-task rows ``_from_markers`` writes and the per-partition ``lag_records`` rows ``_lag`` writes."""
    rows = []
    for i, task in enumerate(tasks):
        process_s = load.first_task_s if i == 0 and load.first_task_s is not None else load.process_s
        figures = {
            "records_in": load.records,
            "records_fetched": load.records * 2,
            "records_out": load.records,
            "dead_letters": 0,
            "read_s": 0.05,
            "key_hash_s": 0.01,
            "process_s": process_s,
        }
        rows += [metric(version, batch, task, name, value) for name, value in figures.items()]
    for p in range(PARTITIONS):
        rows.append(metric(version, batch, f"[deltalog, {STREAM}, {p}]", "lag_records", load.lag / PARTITIONS))
    return rows


def job_rows(version: int, batch: int, task_count: int) -> list[dict[str, Any]]:
    return [
        metric(version, batch, None, "task_count", task_count),
        metric(version, batch, None, "sink_commit_s", 0.03),
        metric(version, batch, None, "batch_replayed", 0.0),
    ]


def metric(version: int, batch: int, task: str | None, name: str, value: float) -> dict[str, Any]:
    return {"job": JOB, "model_version": version, "batch_id": batch, "task": task, "metric": name, "value": value}


def hot(n: int = 8) -> list[Load]:
    """Tasks busy 90% of each 2 s batch while the total lag grows by 800 records per batch (400/s)."""
    return [Load(process_s=1.8, records=250, lag=1_000 + 800 * i) for i in range(n)]


def idle(n: int = 8) -> list[Load]:
    return [Load(process_s=0.1, records=20, lag=10) for _ in range(n)]


def after(last: datetime) -> datetime:
    return last + timedelta(seconds=1)


# --- decisions -----------------------------------------------------------------------------------------------------


def test_growing_lag_with_busy_tasks_scales_up_and_the_decision_is_recorded(home: Home) -> None:
    make_job(home, factor=2)
    now = after(write_batches(home, hot()))
    obs = observe(home, JOB, now)
    assert (obs.factor, obs.partitions, obs.virtual_tasks) == (2, 2, 4)
    assert obs.batches == 7  # the first batch has no predecessor to measure its wall time from
    assert obs.busy_max == pytest.approx(0.9) and obs.busy_mean == pytest.approx(0.9)
    assert obs.processed_rate == pytest.approx(4 * 250 / WALL_S)
    assert obs.lag_slope == pytest.approx(400.0)
    assert obs.input_rate == pytest.approx(500.0 + 400.0)
    assert obs.latest_lag == pytest.approx(1_000 + 800 * 7)
    assert obs.seconds_since_scaling is None

    decision = evaluate(home, JOB, now=now)
    assert (decision.action, decision.factor) == (UP, 4)
    assert any("+400.0 records/s" in r for r in decision.reasons)
    assert decision.to_dict()["reasons"] == list(decision.reasons)

    [row] = read_decisions(home, JOB)
    assert row["job"] == JOB and row["model_version"] == 1 and row["policy"] == "default"
    assert (row["current_factor"], row["action"], row["target_factor"]) == (2, UP, 4)
    assert row["reasons"] == list(decision.reasons)
    assert row["observation"]["busy_max"] == pytest.approx(0.9)
    assert row["observation"]["lag_samples"][0] == [0.0, 1_000.0]
    assert row["decided_at"].tzinfo is not None


def test_idle_tasks_with_small_flat_lag_scale_down(home: Home) -> None:
    make_job(home, factor=4)
    now = after(write_batches(home, idle()))
    decision = evaluate(home, JOB, now=now)
    assert (decision.action, decision.factor) == (DOWN, 2)
    assert read_decisions(home, JOB)[-1]["observation"]["busy_max"] == pytest.approx(0.05)


def test_a_job_that_keeps_up_holds(home: Home) -> None:
    make_job(home, factor=2)
    steady = [Load(process_s=1.0, records=250, lag=500) for _ in range(8)]
    decision = evaluate(home, JOB, now=after(write_batches(home, steady)))
    assert decision == Decision(HOLD, 2, decision.reasons)
    assert any("keeps up" in r for r in decision.reasons)
    assert [r["action"] for r in read_decisions(home, JOB)] == [HOLD]


def test_cooldown_after_a_scaling_step_holds(home: Home) -> None:
    make_job(home, factor=2)
    now = after(write_batches(home, hot()))
    event = ScalingEvent.start(JOB, "rescale", from_factor=1, to_factor=2)
    ControlPlane(home).events.record(replace(event, status="activated", finished_at=now - timedelta(seconds=60)))
    decision = evaluate(home, JOB, now=now)
    assert decision.action == HOLD and "cooldown" in decision.reasons[0]
    assert evaluate(home, JOB, now=now, config={"cooldown_s": 30}).action == UP


def test_too_few_batches_hold(home: Home) -> None:
    make_job(home, factor=2)
    decision = evaluate(home, JOB, now=after(write_batches(home, hot(3))))
    assert decision.action == HOLD and "min_batches=5" in decision.reasons[0]
    assert evaluate(home, JOB, now=after(T0)).action == HOLD  # no metrics at all


def test_only_the_active_model_version_counts(home: Home) -> None:
    make_job(home, factor=2)
    write_batches(home, idle(10))  # v1 was idle ...
    rescale(home, JOB, 4, reason="test")  # ... but v2 is what runs now
    no_cooldown = {"cooldown_s": 0}
    start = T0 + timedelta(seconds=100)
    assert evaluate(home, JOB, now=start, config=no_cooldown).reasons[0].startswith("only 0 batch")
    now = after(write_batches(home, hot(), start=start))
    obs = observe(home, JOB, now, config=no_cooldown)
    assert (obs.factor, obs.virtual_tasks, obs.batches) == (4, 8, 7)
    decision = evaluate(home, JOB, now=now, config=no_cooldown)
    assert (decision.action, decision.factor) == (UP, 8)
    assert [r["model_version"] for r in read_decisions(home, JOB)] == [2, 2]


def test_the_busiest_task_decides_and_the_window_is_the_latest_batches(home: Home) -> None:
    make_job(home, factor=2)
    skewed = [Load(process_s=0.2, records=250, lag=1_000 + 800 * i, first_task_s=1.8) for i in range(8)]
    now = after(write_batches(home, skewed))
    obs = observe(home, JOB, now, config={"window_batches": 5, "min_batches": 3})
    assert obs.batches == 5 and len(obs.lag_samples) == 5  # the window's first batch is timed from the one before
    assert obs.busy_max == pytest.approx(0.9)
    assert obs.busy_mean == pytest.approx((0.9 + 3 * 0.1) / 4)
    assert evaluate(home, JOB, now=now).factor == 4  # one hot bucket is enough: splitting it spreads its keys


@pytest.mark.parametrize("marker", ["heartbeat", "query_started"])
def test_restarts_replays_and_old_batches_do_not_distort_the_busy_ratio(home: Home, marker: str) -> None:
    make_job(home, factor=2)
    control = ControlPlane(home)
    old = write_batches(home, idle(3), start=T0 - timedelta(minutes=30))  # outside the 300 s window
    last = write_batches(home, hot(4), first_batch=3)
    # the driver was restarted: 2 minutes of downtime, then a new query's start marker before its first batch
    restart = last + timedelta(minutes=2)
    control.metrics.append(
        [{"job": JOB, "model_version": 1, "batch_id": -1, "metric": marker, "value": 0.0, "at": restart}]
    )
    last = write_batches(home, hot(4), first_batch=7, start=restart + timedelta(seconds=10))
    # batch 10 replayed after a crash: its metrics are appended a second time, later, with other figures
    replay = [*sink_rows(1, 10, ["Partition 0-0-2"], Load(9.0, 999, 0)), *job_rows(1, 10, 4)]
    control.metrics.append([{**r, "at": last + timedelta(seconds=30)} for r in replay])

    obs = observe(home, JOB, after(last + timedelta(seconds=30)))
    assert obs.batches == 6  # 8 batches in the window; the first, and the one after the restart, are not measured
    assert obs.busy_max == pytest.approx(0.9)
    assert obs.processed_rate == pytest.approx(500.0)
    assert len(obs.lag_samples) == 8
    assert old < T0


def test_a_plugged_policy_by_name_and_its_bad_decisions(home: Home) -> None:
    make_job(home, factor=2, autosize={"policy": f"{__name__}:AlwaysDown", "cooldown_s": 0})
    now = after(write_batches(home, hot(2)))
    decision = evaluate(home, JOB, now=now)
    assert (decision.action, decision.factor) == (DOWN, 1)
    assert read_decisions(home, JOB)[-1]["policy"] == "always-down"
    with pytest.raises(ConfigError, match="outside"):
        evaluate(home, JOB, now=now, policy=f"{__name__}:OutOfBounds")
    with pytest.raises(ConfigError, match="'crashes' failed: ZeroDivisionError"):
        evaluate(home, JOB, now=now, policy=Crashes())
    with pytest.raises(ConfigError, match="cannot import"):
        evaluate(home, JOB, now=now, policy="nowhere_xyz:Policy")
    with pytest.raises(ConfigError, match="autosize policy 'nowhere_xyz:Policy': cannot import"):
        make_job(Home(home.root / "other"), factor=1, autosize={"policy": "nowhere_xyz:Policy"})  # at create
    assert ControlPlane(Home(home.root / "other")).job_models.jobs() == [], "and nothing of it was written"
    assert len(read_decisions(home, JOB)) == 1  # refused decisions are not recorded
    evaluate(home, JOB, now=now, record=False)
    assert len(read_decisions(home, JOB)) == 1


def test_the_job_config_sets_the_bounds(home: Home) -> None:
    config = make_job(home, factor=2, autosize={"max_factor": 2, "min_batches": 3})
    assert config.to_dict()["autosize"] == {"max_factor": 2, "min_batches": 3}
    assert JobConfig.from_dict(config.to_dict()) == config
    model = ControlPlane(home).job_models.active(JOB)
    assert autosize_config(model) == AutosizeConfig(max_factor=2, min_batches=3)
    decision = evaluate(home, JOB, now=after(write_batches(home, hot(4))))
    assert decision.action == HOLD and "max_factor=2" in decision.reasons[-1]


@pytest.mark.parametrize(
    ("autosize", "field"),
    [
        ({"min_factor": 0}, "autosize.min_factor"),
        ({"min_factor": 8, "max_factor": 4}, "autosize.min_factor"),
        ({"cooldown_s": -5}, "autosize.cooldown_s"),
        ({"scale_up_busy": 0.2}, "autosize.scale_down_busy"),
        ({"bogus": 1}, "bogus"),
        ("fast", "'autosize' must be a mapping"),
    ],
)
def test_a_bad_autosize_section_fails_at_job_create(home: Home, autosize: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field) as info:
        make_job(home, factor=1, autosize=autosize)
    assert str(info.value).startswith("job config: ")
    assert ControlPlane(home).job_models.jobs() == []


def test_record_and_read_decisions_keep_order_and_jobs_apart(home: Home) -> None:
    obs = Observation(2, 2, 4, 1.0, 1.0, ((0.0, float("nan")),), 0.5, 0.5, None, 5)
    first = T0
    record_decision(home, "a", 1, Decision(HOLD, 2, ("one",)), "default", obs, decided_at=first + timedelta(seconds=1))
    record_decision(home, "a", 1, Decision(UP, 4, ("two",)), "default", obs, decided_at=first)
    record_decision(home, "b", 3, Decision(DOWN, 1, ("three",)), "mine", obs)
    assert [r["reasons"] for r in read_decisions(home, "a")] == [["two"], ["one"]]
    [b] = read_decisions(home, "b")
    assert (b["model_version"], b["action"], b["target_factor"], b["policy"]) == (3, DOWN, 1, "mine")
    assert b["observation"]["lag_samples"] == [[0.0, None]]  # NaN is not JSON
    assert read_decisions(home, "c") == []


# --- plugged-in policies -------------------------------------------------------------------------------------------


class AlwaysDown:
    name = "always-down"

    def decide(self, observation: Observation, config: AutosizeConfig) -> Decision:
        if observation.factor <= config.min_factor:
            return Decision(HOLD, observation.factor, ("at the bottom",))
        return Decision(DOWN, observation.factor - 1, ("asked",))


class OutOfBounds:
    name = "out-of-bounds"

    def decide(self, observation: Observation, config: AutosizeConfig) -> Decision:
        return Decision(UP, config.max_factor + 1, ("too far",))


class Crashes:
    name = "crashes"

    def decide(self, observation: Observation, config: AutosizeConfig) -> Decision:
        return Decision(HOLD, observation.factor // 0)
