"""Helpers for the keyed-state tests: a producer that knows the fold of every key, and a stateful job."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipelines.core import state as rules
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.state.inspect import state_at
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem, Record
from pipelines.systems.deltalog import DeltaLog

TOTALS = "include/jobs/customer-totals.yaml"


@dataclass
class Fold:
    """What the example job's state must hold for one key: its events, their amounts' sum, its last seq."""

    events: int = 0
    amount: int = 0
    last_seq: int | None = None


@dataclass
class TotalsProducer:
    """Events with a per-key seq and an amount; it keeps each key's expected fold (the oracle)."""

    system: InputSystem
    stream: str
    keys: int
    folds: dict[bytes, Fold] = field(default_factory=dict)
    total: int = 0

    @classmethod
    def on_log(cls, home: Home, stream: str, partitions: int, keys: int) -> TotalsProducer:
        log = DeltaLog(home.streams)
        log.create(stream, partitions)
        return cls(log, stream, keys)

    def produce(self, n: int, bad: Mapping[int, bytes] | None = None) -> None:
        """``n`` events; ``bad`` replaces the value of the i-th with something the job must dead-letter."""
        batch: list[Record] = []
        for i in range(n):
            key = f"key-{(self.total + i) % self.keys}".encode()
            if bad and i in bad:
                batch.append((key, bad[i], None))
                continue
            fold = self.folds.setdefault(key, Fold())
            amount = (self.total + i) % 7 + 1
            value = {"key": key.decode(), "seq": fold.events, "amount": amount}
            fold.events += 1
            fold.amount += amount
            fold.last_seq = value["seq"]
            batch.append((key, json.dumps(value).encode(), None))
        self.system.produce(self.stream, batch)
        self.total += n


def totals_job(home: Home, name: str, factor: int, **changes: Any) -> JobConfig:
    """The example stateful job on ``events``, small batches, no simulated latency."""
    base = JobConfig.load(TOTALS).to_dict()
    base.update(
        name=name,
        elasticity_factor=factor,
        process_options={"latency_ms": 0},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": 150, "trigger_interval": "0 seconds"},
    )
    base.update(changes)
    config = JobConfig.from_dict(base)
    create_job(home, config)
    return config


def state_rows(home: Home, config: JobConfig, name: str = "totals") -> pd.DataFrame:
    """The state's rows now (every committed change), by key."""
    spec = next(s for s in config.state if s.name == name)
    return state_at(home, config.name, spec, None).to_pandas().set_index(rules.KEY)


def fold_mismatches(home: Home, config: JobConfig, producer: TotalsProducer) -> list[str]:
    """Keys whose state is not the fold of their records (values and bookkeeping), as messages."""
    rows = state_rows(home, config)
    bad = []
    for key, fold in producer.folds.items():
        if key not in rows.index:
            bad.append(f"{key!r}: no state row")
            continue
        row = rows.loc[key]
        got = (int(row["events"]), int(row["amount"]), int(row["last_seq"]), int(row[rules.RECORDS]))
        want = (fold.events, fold.amount, fold.last_seq, fold.events)
        if got != want:
            bad.append(f"{key!r}: state {got}, fold {want}")
    extra = sorted(set(rows.index) - set(producer.folds))
    bad += [f"{k!r}: a state row for a key never produced" for k in extra]
    return bad


def commit_batch(
    home: Home,
    job: str,
    spec: rules.StateSpec,
    keys: list[bytes],
    *,
    factor: int = 1,
    bucket: int = 0,
    batch_id: int = 0,
    stream: str = "events",
    partition: int = 0,
) -> int:
    """One virtual task's micro-batch without Spark: every key's ``events`` counted once more, its changes
    committed as the next segment, as the sink's commit does; the segment committed."""
    from pipelines.state.cache import StateCache
    from pipelines.state.durable import StateTables
    from pipelines.state.task import StateVersions, TaskStates

    tables = StateTables(home, job, spec)
    segment = tables.segment()
    task = TaskStates(
        home,
        job,
        [spec],
        StateVersions({spec.name: segment}, 10**15 + batch_id),
        factor=factor,
        bucket=bucket,
        model_version=1,
        batch_id=batch_id,
        cache=StateCache(home.root.local_path() / f"cache-{batch_id}"),
    )
    task.load(keys)
    for i, key in enumerate(keys):
        task.begin()
        seen = task.api.get(key) or {"events": 0}
        task.api.put(key, {**seen, "events": seen["events"] + 1})
        task.commit([(key, stream, partition, str(batch_id * 100_000 + i))])
    files = task.finish()[spec.name]
    landed = tables.commit(files, previous=segment, app_id=f"{job}/v1/q", batch_id=batch_id, time_us=10**15 + batch_id)
    assert landed == segment + 1
    return landed
