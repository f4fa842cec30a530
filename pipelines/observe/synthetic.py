"""Metric rows shaped exactly as a run writes them, for tests, the UI benchmark and screenshots.

Per batch: the sink's per-task rows (``records_in`` ... ``process_s``), one
``lag_records`` row per partition, the job-wide ``task_count``,
``sink_commit_s``, ``control_commit_s`` and ``batch_replayed``, and the
driver's ``batch_duration_s``. Append them with ``Metrics.append`` (which
validates every row), so what the view reads went through the real table.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStreamPartition


def run_rows(
    model: JobModel,
    *,
    batches: int,
    start: float,
    every_s: float,
    records_per_batch: int,
    lag: int = 0,
    hot_task: str | None = None,
    hot_weight: float = 4.0,
    seed: int = 0,
    first_batch: int = 0,
    keys_per_task: int = 20,
) -> list[dict[str, Any]]:
    """``batches`` committed micro-batches of ``model``, one every ``every_s`` seconds from ``start`` (epoch s).

    Each task gets an equal share of ``records_per_batch`` (``hot_task`` gets
    ``hot_weight`` shares of the records over the same ``keys_per_task``
    distinct keys: a hot key bucket); the lag starts at ``lag`` records per
    partition and shrinks to zero over the run.
    """
    rng = random.Random(seed)
    tasks = sorted(model.tasks(), key=lambda t: t.task_name)
    weights = {str(t.task_name): hot_weight if str(t.task_name) == hot_task else 1.0 for t in tasks}
    total_weight = sum(weights.values())
    partitions = sorted({s.whole() for t in tasks for s in t.ssps})
    # the first task of each partition fetches it (read-once): records_fetched on it alone
    fetcher: dict[SystemStreamPartition, str] = {}
    for t in tasks:
        for s in t.ssps:
            fetcher.setdefault(s.whole(), str(t.task_name))
    rows: list[dict[str, Any]] = []
    job, version = model.job_name, model.version
    for i in range(batches):
        batch = first_batch + i
        at = datetime.fromtimestamp(start + i * every_s, UTC)
        records = {name: int(records_per_batch * w / total_weight) for name, w in weights.items()}
        per_partition = {p: 0 for p in partitions}
        for t in tasks:
            for s in t.ssps:
                per_partition[s.whole()] += records[str(t.task_name)] // max(1, len(t.ssps))
        duration = every_s * (0.5 + 0.3 * rng.random())
        for t in tasks:
            name = str(t.task_name)
            n = records[name]
            fetched = sum(per_partition[p] for p, f in fetcher.items() if f == name)
            values = {
                "records_in": n,
                "keys_in": min(n, keys_per_task),
                "records_fetched": fetched,
                "bytes_fetched": fetched * 120,
                "records_out": n,
                "dead_letters": 0,
                "read_s": fetched * 2e-6,
                "key_hash_s": n * 1e-6,
                "wait_s": 0.001 if fetched == 0 else 0.0,
                "process_s": n * 0.002,
            }
            rows += [_row(job, version, batch, name, k, v, at) for k, v in values.items()]
        behind = int(lag * (1 - i / max(1, batches - 1)))
        rows += [_row(job, version, batch, p.wire(), "lag_records", behind, at) for p in partitions]
        for k, v in (("task_count", len(tasks)), ("sink_commit_s", 0.02), ("batch_replayed", 0.0)):
            rows.append(_row(job, version, batch, None, k, v, at))
        rows.append(_row(job, version, batch, None, "control_commit_s", 0.01, at))
        rows.append(_row(job, version, batch, None, "batch_duration_s", duration, at))
    return rows


def _row(job: str, version: int, batch: int, task: str | None, name: str, value: float, at: datetime) -> dict[str, Any]:
    return {
        "job": job,
        "model_version": version,
        "batch_id": batch,
        "task": task,
        "metric": name,
        "value": float(value),
        "at": at,
    }
