"""The ``autosize_decisions`` table: every decision the autosizer made, with what it saw.

Append-only and partitioned by job, like the other control tables: each
evaluation is a new fact, written by whichever process evaluated (an Airflow
task, the CLI), and blind appends from several of them never conflict. A
decision row keeps the whole observation and the policy's reasons as JSON, so
"why did it scale at 03:10?" is answered from the table alone, even after the
thresholds or the policy changed.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, column
from pipelines.core.autosize import Decision, Observation
from pipelines.core.ssp import validate_name
from pipelines.storage.home import Home

AUTOSIZE_DECISIONS = TableSpec(
    "autosize_decisions",
    pa.schema(
        [
            column("job", pa.string()),
            column("model_version", pa.int64()),  # the active version the observation was taken from
            column("current_factor", pa.int32()),
            column("action", pa.string()),  # "up" | "down" | "hold" | "skip" (the job was being scaled)
            column("target_factor", pa.int32()),  # equal to current_factor on hold
            column("policy", pa.string()),
            column("reasons", pa.string()),  # JSON list of strings
            column("observation", pa.string()),  # JSON object: Observation.to_dict()
            column("decided_at", TIMESTAMP),
        ]
    ),
    "Autosizer decisions per job: action, target factor, the policy's reasons and the observation they came from",
    append_only=True,
)


def _table(home: Home) -> ControlTable:
    return ControlTable(AUTOSIZE_DECISIONS, home)


def record_decision(
    home: Home,
    job: str,
    model_version: int,
    decision: Decision,
    policy_name: str,
    observation: Observation,
    *,
    decided_at: datetime | None = None,
) -> dict[str, Any]:
    """Append one decision (one commit) and return the row as written, reasons and observation parsed."""
    validate_name("job", job)
    row = {
        "job": job,
        "model_version": int(model_version),
        "current_factor": observation.factor,
        "action": decision.action,
        "target_factor": decision.factor,
        "policy": policy_name,
        "reasons": json.dumps(list(decision.reasons)),
        "observation": json.dumps(_finite(observation.to_dict()), sort_keys=True, default=str),
        "decided_at": decided_at or _table(home).now(),
    }
    _table(home).append([row])
    return _parsed(row)


def read_decisions(home: Home, job: str) -> list[dict[str, Any]]:
    """A job's decisions, oldest first; ``reasons`` and ``observation`` parsed from their JSON."""
    table = _table(home).read(job)
    return [_parsed(r) for r in table.sort_by("decided_at").to_pylist()]


def _finite(value: Any) -> Any:
    """NaN and infinities as null: they are not JSON, and the Airflow UI and browsers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _parsed(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "reasons": json.loads(row["reasons"]), "observation": json.loads(row["observation"])}
