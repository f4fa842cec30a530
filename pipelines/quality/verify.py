"""Verify a job against its input: the checks of ``checks`` over what the control plane says was read."""

from __future__ import annotations

import pandas as pd

from pipelines.control.home import Home
from pipelines.control.tables import ControlPlane
from pipelines.deltaio import read_delta
from pipelines.jobs.registry import job_config
from pipelines.quality.checks import Verdict, expected_records, verify_rows
from pipelines.systems.registry import open_system


def verify_job(home: Home, job: str, *, sequence: str | None = None) -> Verdict:
    """Every input record below the active model's committed checkpoints must be in the sink or dead letters,
    once, in per-key order, and routed to its bucket's virtual task."""
    control = ControlPlane(home)
    model = control.active_model(job)
    config = job_config(model)
    checkpoints = control.latest_checkpoints(job, model.version)
    committed: dict[tuple[str, int], int] = {}
    for ssp, offset in checkpoints.offsets.items():
        key = (ssp.stream, ssp.partition)
        committed[key] = min(committed.get(key, int(offset)), int(offset))
    ranges = []
    for stream in config.inputs:
        meta = open_system(stream.system, home).describe(stream.stream)
        for p, part in meta.partitions.items():
            ranges.append((stream.stream, p, int(part.earliest), committed.get((stream.stream, p), int(part.earliest))))
    rows = _table(home, config.sink_table)
    dead = _table(home, config.dead_letter_table)
    factors = {int(h["version"]): int(h["factor"]) for h in control.model_history(job) if h["event"] == "planned"}
    return verify_rows(expected_records(ranges), rows, dead, factors.__getitem__, sequence)


def _table(home: Home, name: str) -> pd.DataFrame:
    return read_delta(home.sinks / name).to_pandas()
