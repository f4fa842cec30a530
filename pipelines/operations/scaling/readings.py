"""What the steps read to decide and to report: the driver's liveness, the inputs' ends, the lag, the figures.

Each is one look at the control plane or the job's inputs. Nothing here
compares one host's clock with another's: a driver's liveness is its last
row's age on the store's clock, and the figures come from the control
plane's rows (docs/design.md, "Beyond one machine").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pipelines.control import ControlPlane, Home
from pipelines.control.drivers import RECENT_LIVE_S, STALE_AFTER_S
from pipelines.control.scaling_events import ScalingEvent
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import PipelinesError
from pipelines.jobs.config import job_config
from pipelines.jobs.output_schema import parse_output_schema
from pipelines.operations.scaling.operation import Mode, Target
from pipelines.systems.registry import JobSystems

LIVE_AFTER_S = STALE_AFTER_S  # a driver whose last heartbeat is older than this is not live (it beats every 10 s)


def last_heartbeat(control: ControlPlane, job: str) -> dict[str, Any] | None:
    """The job's driver's latest sign of life, from the ``drivers`` table: which driver, its age, whether it is live.

    Live means a driver that has not ended (its registration wrote no stop or
    failure) and whose last row is younger than ``LIVE_AFTER_S`` (it beats
    every 10 s), both times the store's: the driver stamps its rows with the
    store's time and the age is taken against the store's now, so neither
    host's clock counts. A driver that finished an available-now run has
    ended: it is not live, though its last beat is fresh. The live driver if
    there is one, else the one heard from last; None when none ever ran.
    """
    now = control.drivers.now()
    drivers = control.drivers.latest(job, now=now, recent_s=RECENT_LIVE_S)
    if not drivers:
        return None
    live = [d for d in drivers if d.live(now)]
    d = live[0] if live else max(drivers, key=lambda d: d.at)
    return {
        "model_version": d.model_version,
        "age_s": d.age_s(now),
        "live": bool(live),
        "state": d.state,
        "driver_id": d.driver_id,
        "host": d.host,
        "pid": d.pid,
        "on_this_host": d.on_this_host,
    }


def end_positions(home: Home, job: str) -> Target:
    """Every input's end position per partition, now: ``{"system/stream": {"0": "1200", ...}}``."""
    config = job_config(ControlPlane(home).job_models.active(job))
    result: Target = {}
    with job_systems(home, job) as systems:
        for stream in config.inputs:
            ends = systems.of(stream.system).end_positions(stream.stream)
            result[f"{stream.system}/{stream.stream}"] = {str(p): end for p, end in ends.items()}
    return result


def lag_behind(home: Home, job: str, version: int, target: Target) -> tuple[bool, int | None]:
    """Whether ``version``'s committed checkpoints reached ``target``, and how many records are left if countable."""
    control = ControlPlane(home)
    checkpoints = control.checkpoints.latest(job, version).offsets.items()
    done = True
    behind: int | None = 0  # None once a partition's records cannot be counted
    with job_systems(home, job) as systems:
        committed = systems.floors(checkpoints)
        for stream_key, partitions in target.items():
            system_name, stream = stream_key.split("/", 1)
            system = systems.of(system_name)
            for p, end in partitions.items():
                position = committed.get(SystemStreamPartition(system_name, stream, int(p)))
                if position is None:
                    continue  # a partition this version does not read
                if system.reached(stream, int(p), position, end):
                    continue
                done = False
                count = system.records_between(stream, int(p), position, end)
                behind = None if count is None or behind is None else behind + count
    return done, (0 if done else behind)


def default_sequence(home: Home, job: str) -> str | None:
    """The per-key sequence column that proves order across an expansion: ``seq`` when the job emits one."""
    config = job_config(ControlPlane(home).job_models.active(job))
    return "seq" if "seq" in parse_output_schema(config.output_schema).fieldNames() else None


def measure(home: Home, event: ScalingEvent) -> dict[str, Any]:
    """Downtime (in-place switches), records replayed, and the DQ verdict of one event, from the control plane."""
    control = ControlPlane(home)
    figures: dict[str, Any] = {"dq": event.details.get("dq", "not run")}
    if event.to_version is None:
        return figures
    if event.details.get("mode") == Mode.IN_PLACE:
        # the old query stopped after the event began, both stamped by the store's clock
        stopped = metric_times(control, event.job, event.from_version, ("query_stopped",), since=event.started_at)
        resumed = metric_times(control, event.job, event.to_version, ("first_progress",)) or metric_times(
            control, event.job, event.to_version, ("query_started",)
        )
        if stopped and resumed:
            figures["downtime_s"] = round(min(resumed) - max(s for s in stopped if s <= min(resumed)), 3)
    else:
        figures["downtime_s"] = None  # no driver was running: nothing was down because of the rescale
    figures["records_replayed"] = records_replayed(home, event.job, event.from_version, event.to_version)
    if "caught_up_s" in event.details:
        figures["caught_up_s"] = event.details["caught_up_s"]
    return figures


def records_replayed(home: Home, job: str, old: int | None, new: int) -> int | None:
    """Records N+1 starts behind where N had committed, over all partitions: records processed twice.

    None when N has no checkpoints or an input system cannot count records
    between two positions (Kinesis): then it is unknown, not zero.
    """
    if old is None:
        return None
    control = ControlPlane(home)
    try:
        old_latest = control.checkpoints.latest(job, old).offsets.items()
    except PipelinesError:
        return None
    with job_systems(home, job) as systems:
        final = systems.floors(old_latest)
        start = systems.floors(control.checkpoints.start(job, new).items())
        total = 0
        for ssp, position in start.items():
            if ssp not in final:
                continue
            system = systems.of(ssp.system)
            if system.position_key(position) >= system.position_key(final[ssp]):
                continue
            count = system.records_between(ssp.stream, ssp.partition, position, final[ssp])
            if count is None:
                return None
            total += count
    return total


def metric_times(
    control: ControlPlane, job: str, version: int | None, names: tuple[str, ...], since: datetime | None = None
) -> list[float]:
    """When a model version's driver reported the named metrics (query started, stopped, first progress).

    ``since`` (the store's time) skips the files of an old version's earlier life: without it, the stop of a
    version that ran for days is looked for among all of its metric rows.
    """
    if version is None:
        return []
    frame = control.metrics.read(job, model_version=version, metrics=names, since=since)
    return [float(v) for v in frame["value"]] if len(frame) else []


def job_systems(home: Home, job: str) -> JobSystems:
    return JobSystems(home, job_config(ControlPlane(home).job_models.active(job)).systems)
