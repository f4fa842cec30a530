"""Verify a job against its input: the checks of ``checks`` over what the control plane says was read."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.core.ssp import SystemStreamPartition
from pipelines.deltaio import read_delta
from pipelines.errors import PipelinesError
from pipelines.jobs.config import job_config
from pipelines.quality.checks import Verdict, expected_records, verify_rows, with_input_order
from pipelines.systems.registry import JobSystems


@dataclass
class Window:
    """What one validation covers: the input records it must account for and the sink rows it judges.

    A *run* window is the whole job: every input record from each partition's earliest offset up to the
    active model's committed checkpoints, and every sink and dead-letter row. An *event* window is the
    batches around one scaling event: the records from the old model's start checkpoints up to the new
    model's committed checkpoints, and the rows both model versions wrote.
    """

    job: str
    window_id: str
    expected: pd.DataFrame
    rows: pd.DataFrame
    dead: pd.DataFrame
    factors: dict[int, int]


def load_window(home: Home, job: str, event: str | None = None) -> Window:
    control = ControlPlane(home)
    model = control.job_models.active(job)
    config = job_config(model)
    factors = {int(h["version"]): int(h["factor"]) for h in control.job_models.history(job) if h["event"] == "planned"}
    if event is None:
        versions = None
        last = model.version
        start_rows: dict[SystemStreamPartition, str] = {}
        window_id = f"run:v{model.version}"
    else:
        e = control.events.find(job, event)
        if e is None:
            known = ", ".join(x.event_id[:12] for x in control.events.history(job)) or "none"
            raise PipelinesError(f"job {job!r} has no single scaling event matching {event!r}; events: {known}")
        versions = [v for v in (e.from_version, e.to_version) if v is not None]
        if not versions:
            raise PipelinesError(f"scaling event {e.event_id} of job {job!r} names no model version")
        last = max(versions)
        start_rows = control.checkpoints.start(job, min(versions))
        window_id = f"event:{e.event_id}"
    with JobSystems(home, config.systems) as systems:
        starts = systems.floors(start_rows.items())
        # Checkpoints first, then the sink: the sink commits a batch before its checkpoints are appended, so a
        # sink read after the checkpoint read holds every record those checkpoints cover, even while the job runs.
        committed = systems.floors(control.checkpoints.latest(job, last).offsets.items())
        rows = _table(home, config.sink_table)
        dead = _table(home, config.dead_letter_table)
        if versions is not None:
            rows = rows[rows["model_version"].isin(versions)]
            dead = dead[dead["model_version"].isin(versions)]
        parts = []
        for stream in config.inputs:
            system = systems.of(stream.system)
            for p, part in system.describe(stream.stream).partitions.items():
                ssp = SystemStreamPartition(stream.system, stream.stream, p)
                start = part.earliest
                if ssp in starts and system.position_key(starts[ssp]) > system.position_key(start):
                    start = starts[ssp]
                end = committed.get(ssp)
                if end is None or system.position_key(end) <= system.position_key(start):
                    continue
                read = system.read(stream.stream, p, start, end, columns=["offset"])
                parts.append((stream.stream, p, read.records.column("offset").to_pylist()))
        order = {s.stream: systems.of(s.system).position_key for s in config.inputs}
        rows = with_input_order(rows, order.__getitem__)
    return Window(job, window_id, expected_records(parts), rows, dead, factors)


def verify_job(home: Home, job: str, *, sequence: str | None = None, event: str | None = None) -> Verdict:
    """Every input record of the window (the whole run, or one scaling event's) must be in the sink or dead
    letters, once, in per-key order, and routed to its bucket's virtual task."""
    w = load_window(home, job, event)
    return verify_rows(w.expected, w.rows, w.dead, w.factors.__getitem__, sequence)


def _table(home: Home, name: str) -> pd.DataFrame:
    return read_delta(home.sinks / name).to_pandas()
