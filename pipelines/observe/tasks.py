"""The per-virtual-task table: what each task reads, where it stands, how fast it went, whether it waits.

Pure: the active job model, its checkpoints, the metric rows of its last
batches and the held-back partitions in; rows out, slowest first.

* **slowest**: the most busy time per batch (reading, hashing, waiting for a
  sibling's fetch, processing) over the last batches: a micro-batch ends when
  its slowest task does, so this is the task that holds the others up; ties
  by lag, then name.
* **lag** is its partitions' (key buckets of one partition advance together,
  so every bucket of a partition is as far behind as the partition).
* **skew**: the task's records against what its keys account for (the
  distinct keys it saw, ``keys_in``), flagged only when the excess is
  significant for the sample: a hot key bucket (``pipelines.observe.skew``
  says how it is decided and why the share of records alone is not enough).
* **held**: a partition an expansion holds back, or a Kinesis slot still
  reading a closed parent shard whose children wait; the reason is the
  input system's (``pipelines.observe.systems``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pipelines.core.model import JobModel
from pipelines.core.positions import Position
from pipelines.core.ssp import SystemStreamPartition
from pipelines.observe.series import KEYS, LAG, TASK_TIMES, TIME_BEHIND, BatchPoint, latest_values
from pipelines.observe.skew import judge

LAST_BATCHES = 5


@dataclass(frozen=True)
class TaskRow:
    task: str
    key_bucket: int | None
    factor: int
    inputs: tuple[str, ...]  # the partitions it reads, e.g. "deltalog.events[0]"
    checkpoints: Mapping[str, Position]  # its (SSP, key bucket)s' next positions, by partition
    lag_records: int | None
    lag_s: float | None
    records: int  # records of its key buckets over the last batches
    rate: float | None  # records / s over the last batches' durations
    busy_s: float  # busy time per batch over the last batches
    share: float | None  # of all tasks' records over the last batches
    skew: float | None  # records / the records its keys account for (or the fair share, without key counts)
    skewed: bool  # significantly so (``skew.judge``): a hot key bucket
    keys: int | None  # distinct keys per batch, summed over the last batches (None: not reported)
    held: str | None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "inputs": list(self.inputs), "checkpoints": dict(self.checkpoints)}


def partition_label(ssp: SystemStreamPartition) -> str:
    return f"{ssp.system}.{ssp.stream}[{ssp.partition}]"


def task_table(
    model: JobModel,
    checkpoints: Mapping[SystemStreamPartition, Position],
    rows: Iterable[Mapping[str, Any]],
    points: list[BatchPoint],
    held: Mapping[SystemStreamPartition, str] | None = None,
    last_batches: int = LAST_BATCHES,
) -> list[TaskRow]:
    """One row per virtual task of ``model``, slowest first; ``rows``/``points`` may hold other versions too."""
    held = held or {}
    recent = [p for p in points if p.version == model.version][-last_batches:]
    batch_ids = {p.batch for p in recent}
    seconds = sum(p.elapsed_s or 0.0 for p in recent)
    latest = max(batch_ids, default=None)
    per_task: dict[str, dict[str, float]] = {}
    lag_of: dict[SystemStreamPartition, tuple[int, float]] = {}  # latest lag row per partition: (batch, value)
    for (version, batch, task, name), (_, value) in latest_values(rows).items():
        if version != model.version or batch not in batch_ids or task is None:
            continue
        if name == LAG:
            whole = SystemStreamPartition.from_wire(task).whole()
            if whole not in lag_of or batch > lag_of[whole][0]:
                lag_of[whole] = (batch, value)
            continue
        sums = per_task.setdefault(task, {})
        if name == TIME_BEHIND:  # the latest batch's, not a sum
            if batch == latest:
                sums[TIME_BEHIND] = max(sums.get(TIME_BEHIND, 0.0), value)
            continue
        sums[name] = sums.get(name, 0.0) + value
    tasks = list(model.tasks())
    total = sum(per_task.get(str(t.task_name), {}).get("records_in", 0.0) for t in tasks)
    counts = [int(per_task.get(str(t.task_name), {}).get("records_in", 0.0)) for t in tasks]
    known = all(KEYS in per_task.get(str(t.task_name), {}) for t, n in zip(tasks, counts, strict=True) if n)
    keys = [int(per_task.get(str(t.task_name), {}).get(KEYS, 0.0)) for t in tasks] if known else None
    verdicts = judge(counts, keys)
    result = []
    for t, verdict in zip(tasks, verdicts, strict=True):
        name = str(t.task_name)
        sums = per_task.get(name, {})
        wholes = sorted({s.whole() for s in t.ssps})
        lags = [int(lag_of[w][1]) for w in wholes if w in lag_of]
        records = int(sums.get("records_in", 0.0))
        share = records / total if total else None
        reasons = [f"{partition_label(w)}: {held[w]}" for w in wholes if w in held]
        behind = sums.get(TIME_BEHIND)
        result.append(
            TaskRow(
                task=name,
                key_bucket=t.task_name.key_bucket if t.task_name.factor > 1 else None,
                factor=model.elasticity_factor,
                inputs=tuple(partition_label(w) for w in wholes),
                checkpoints={partition_label(s.whole()): checkpoints[s] for s in sorted(t.ssps) if s in checkpoints},
                lag_records=sum(lags) if lags else None,
                lag_s=behind / 1000.0 if behind is not None else None,
                records=records,
                rate=records / seconds if seconds else None,
                busy_s=sum(sums.get(n, 0.0) for n in TASK_TIMES) / len(recent) if recent else 0.0,
                share=share,
                skew=verdict.ratio,
                skewed=verdict.skewed,
                keys=int(sums[KEYS]) if KEYS in sums else None,
                held="; ".join(reasons) or None,
            )
        )
    result.sort(key=lambda r: (-r.busy_s, -(r.lag_records or 0), r.task))
    return result
