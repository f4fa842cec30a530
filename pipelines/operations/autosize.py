"""Scale evaluation: observe a job from its metrics, ask its autosize policy, record the decision.

``evaluate(home, job)`` is what the CLI and the ``scale_evaluation`` DAG call;
it decides and records, and never rescales: acting on an "up" or "down" is the
rescale operation's job, under its own lock and checks.

The settings of a job's ``autosize:`` section and what the observation is made of (batch wall time,
busy ratio, lag, rates, all on the store's clock) are in docs/operations.md, "Autosizing".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import pandas as pd

from pipelines.control import ControlPlane
from pipelines.control.decisions import record_decision
from pipelines.control.locks import ScalingLock
from pipelines.core.autosize import (
    SKIP,
    AutosizeConfig,
    AutosizePolicy,
    Decision,
    DefaultPolicy,
    Observation,
    check_decision,
    lag_slope,
    load_policy,
)
from pipelines.core.metric_names import LAG
from pipelines.core.model import JobModel
from pipelines.errors import ConfigError, PipelinesError
from pipelines.jobs.config import job_config
from pipelines.jobs.spec import autosize_config as checked_autosize
from pipelines.storage.home import Home

BATCH_METRICS = ("task_count", "sink_commit_s")
"""Job-wide rows the sink writes once per committed batch: they date the batch."""
TASK_METRICS = ("process_s", "records_in")
LAG_METRIC = LAG
QUERY_BOUNDARIES = ("query_started", "query_stopped")
HEARTBEAT = "heartbeat"

ConfigLike = AutosizeConfig | Mapping[str, Any] | None
PolicyLike = AutosizePolicy | str | None


def observe(home: Home, job: str, now: datetime | None = None, *, config: ConfigLike = None) -> Observation:
    """The active model version's picture over the window; ``config`` (default: the job's) sets the window."""
    control = ControlPlane(home)
    model = control.job_models.active(job)
    return _observe(control, model, _config(model, config), _now(control, now))


def evaluate(
    home: Home,
    job: str,
    *,
    config: ConfigLike = None,
    policy: PolicyLike = None,
    record: bool = True,
    now: datetime | None = None,
    owner: str | None = None,
    decided_at: datetime | None = None,
) -> Decision:
    """Observe the job, let the policy decide, and (``record``) append the decision to ``autosize_decisions``.

    A job whose scaling lock is held (a rescale or an expansion under way)
    gets a ``skip`` decision naming the holder, recorded like any other;
    a hold by ``owner`` is not another's (a rescale that waited for the lock
    asks the autosizer again while it holds it). ``decided_at`` stamps the
    row (default: the store's time when written), so a caller can name what
    it triggers after the decision.

    ``config`` overrides the job's ``autosize:`` section (a mapping is read
    over the defaults, not over the job's section); ``policy`` overrides the
    config's ``policy`` (an object or a ``package.module:Class`` name). A
    decision that points the wrong way or leaves the bounds is refused with a
    ``ConfigError`` and not recorded.
    """
    control = ControlPlane(home)
    model = control.job_models.active(job)
    cfg = _config(model, config)
    chosen = _policy(policy, cfg)
    observation = _observe(control, model, cfg, _now(control, now))
    holder = ScalingLock(home).state(job)
    if holder is not None and holder.held and holder.owner != owner:
        # A rescale or an expansion is under way: the metrics are in flux and acting would only be refused.
        reason = f"skipped: job {job!r} is being scaled; {holder.describe()}"
        decision = Decision(SKIP, observation.factor, (reason,))
    else:
        decision = check_decision(_decide(chosen, observation, cfg), observation, cfg, chosen.name)
    if record:
        record_decision(home, job, model.version, decision, chosen.name, observation, decided_at=decided_at)
    return decision


def autosize_config(model: JobModel) -> AutosizeConfig:
    """The ``autosize:`` section of the configuration a model was planned from, over the defaults."""
    return job_config(model).autosize_config()


# ------------------------------------------------------------------------------------------------- internals


def _policy(policy: PolicyLike, cfg: AutosizeConfig) -> AutosizePolicy:
    if policy is None:
        return load_policy(cfg.policy)
    if isinstance(policy, str):
        return load_policy(policy)
    if isinstance(policy, AutosizePolicy):
        return policy
    raise ConfigError(f"autosize policy must be a policy object or a 'package.module:Class' name, got {policy!r}")


def _config(model: JobModel, config: ConfigLike) -> AutosizeConfig:
    if config is None:
        return autosize_config(model)
    if isinstance(config, AutosizeConfig):
        return config
    return checked_autosize(config)


def _decide(policy: AutosizePolicy, observation: Observation, config: AutosizeConfig) -> Decision:
    """The policy's decision; a plugged-in policy that fails is the user's to fix, so it is a ConfigError."""
    if isinstance(policy, DefaultPolicy):
        return policy.decide(observation, config)
    try:
        return policy.decide(observation, config)
    except PipelinesError:
        raise
    except Exception as e:
        raise ConfigError(f"autosize policy {policy.name!r} failed: {type(e).__name__}: {e}") from e


def _now(control: ControlPlane, now: datetime | None) -> datetime:
    """``now`` as aware UTC; by default the store's time, the clock every row's ``at`` is stamped with."""
    if now is None:
        return control.clock.now()
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)


class _Shape(TypedDict):
    """The fields of an ``Observation`` that describe the job, not its batches (the same with or without batches)."""

    factor: int
    partitions: int
    virtual_tasks: int
    seconds_since_scaling: float | None


def _observe(control: ControlPlane, model: JobModel, cfg: AutosizeConfig, now: datetime) -> Observation:
    job, version = model.job_name, model.version
    # Only rows of the window count (``_first_commits``; a boundary matters only between two of its commits), so
    # only the window's files are read: files are pruned by their ``at`` statistics, and the cost stays that of
    # the window however long the version has run (bench_control, 200,000 batches: 25.9 ms, the whole version 233.8).
    oldest = now - timedelta(seconds=cfg.window_s)
    names = [*BATCH_METRICS, *QUERY_BOUNDARIES, HEARTBEAT]
    frame = control.metrics.read(job, model_version=version, metrics=names, since=oldest)
    dated = _first_commits(frame[frame["metric"].isin(BATCH_METRICS)], cfg, now)
    commits = {b: dated[b] for b in sorted(dated)[-cfg.window_batches :]}
    base: _Shape = {
        "factor": model.elasticity_factor,
        "partitions": sum(model.partitions().values()),
        "virtual_tasks": model.task_count,
        "seconds_since_scaling": _seconds_since_scaling(control, job, now),
    }
    if not commits:
        return Observation(
            **base, input_rate=0.0, processed_rate=0.0, lag_samples=(), busy_mean=0.0, busy_max=0.0, batches=0
        )
    rows = control.metrics.read(
        job, model_version=version, metrics=[*TASK_METRICS, LAG_METRIC], since_batch=min(commits), since=oldest
    ).to_dict("records")
    rows = [r for r in rows if r["batch_id"] in commits and _ts(r["at"]) == commits[r["batch_id"]]]
    boundaries = _query_boundaries(frame)

    origin = min(commits.values())
    lag: dict[int, float] = defaultdict(float)
    process: dict[int, dict[str, float]] = defaultdict(dict)
    records: dict[int, float] = defaultdict(float)
    for r in rows:
        b = r["batch_id"]
        if r["metric"] == LAG_METRIC:
            lag[b] += r["value"]
        elif r["metric"] == "process_s" and r["task"] is not None:
            process[b][r["task"]] = process[b].get(r["task"], 0.0) + r["value"]
        elif r["metric"] == "records_in":
            records[b] += r["value"]
    samples = tuple(((commits[b] - origin).total_seconds(), lag[b]) for b in sorted(lag))

    busy_s: dict[str, float] = defaultdict(float)
    wall_s: dict[str, float] = defaultdict(float)
    measured, read, wall_total = 0, 0.0, 0.0
    for b in sorted(commits):
        start, end = dated.get(b - 1), commits[b]  # the predecessor may be just outside window_batches
        if start is None or end <= start or any(start < t < end for t in boundaries):
            continue
        wall = (end - start).total_seconds()
        measured += 1
        wall_total += wall
        read += records[b]
        for task, seconds in process[b].items():
            busy_s[task] += seconds
            wall_s[task] += wall
    busy = [min(1.0, busy_s[t] / wall_s[t]) for t in busy_s if wall_s[t] > 0]
    processed = read / wall_total if wall_total > 0 else 0.0
    return Observation(
        **base,
        input_rate=max(0.0, processed + lag_slope(samples)),
        processed_rate=processed,
        lag_samples=samples,
        busy_mean=sum(busy) / len(busy) if busy else 0.0,
        busy_max=max(busy, default=0.0),
        batches=measured,
    )


def _first_commits(frame: pd.DataFrame, cfg: AutosizeConfig, now: datetime) -> dict[int, datetime]:
    """Batch id -> its first commit time, for the batches committed within ``window_s`` before now."""
    first: dict[int, datetime] = {}
    oldest = now - timedelta(seconds=cfg.window_s)
    for batch, at in zip(frame["batch_id"].tolist(), frame["at"].tolist(), strict=True):
        t = _ts(at)
        if batch >= 0 and oldest <= t <= now and (batch not in first or t < first[batch]):
            first[int(batch)] = t
    return first


def _query_boundaries(frame: pd.DataFrame) -> list[datetime]:
    """When a query of this version started or stopped (see the module docstring)."""
    return [
        _ts(at)
        for metric, batch, at in zip(frame["metric"], frame["batch_id"], frame["at"], strict=True)
        if metric in QUERY_BOUNDARIES or (metric == HEARTBEAT and batch < 0)
    ]


def _seconds_since_scaling(control: ControlPlane, job: str, now: datetime) -> float | None:
    events = control.events.history(job)
    if not events:
        return None
    latest = max(e.finished_at or e.started_at for e in events)
    return max(0.0, (now - _ts(latest)).total_seconds())


def _ts(value: Any) -> datetime:
    """A timestamp from Delta (pandas or Python) as an aware UTC datetime, compared to the microsecond."""
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    stamp: datetime = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return stamp
