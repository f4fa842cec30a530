"""Helpers for runtime tests: demo input with per-key sequence numbers, jobs, and what the sink holds."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pandas as pd

from pipelines.core.hashing import key_bucket
from pipelines.deltaio import read_delta
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem, Record
from pipelines.systems.deltalog import DeltaLog

DEMO = "include/jobs/enrichment.yaml"


def produce(home: Home, stream: str, records: int, keys: int, *, bad_every: int = 0, partitions: int = 2) -> int:
    """Demo events over ``keys`` keys with per-key seq; every ``bad_every``-th value is not JSON. Returns bad count."""
    log = DeltaLog(home.streams)
    if stream not in log.list_streams():
        log.create(stream, partitions)
    seq: dict[str, int] = {}
    batch, bad = [], 0
    for i in range(records):
        key = f"key-{i % keys}"
        if bad_every and i % bad_every == bad_every - 1:
            batch.append((key.encode(), b"{not json", None))
            bad += 1
            continue
        n = seq.get(key, 0)
        seq[key] = n + 1
        batch.append((key.encode(), json.dumps({"key": key, "seq": n, "payload": str(i)}).encode(), None))
    log.produce(stream, batch)
    return bad


class SeqProducer:
    """Demo events with a per-key seq that continues across calls, into a stream of any input system."""

    def __init__(self, system: InputSystem, stream: str, partitions: int, keys: int, *, create: bool = True) -> None:
        self.system, self.stream, self.keys = system, stream, keys
        if create:
            system.create(stream, partitions)
        self.seq: dict[str, int] = {}
        self.total = 0

    def produce(self, n: int, *, pack: Callable[[list[Record]], list[Record]] | None = None) -> None:
        """``n`` more records; ``pack`` turns them into what is sent (KPL aggregates: ``systems.kpl``)."""
        batch: list[Record] = []
        for i in range(n):
            key = f"key-{(self.total + i) % self.keys}"
            s = self.seq.get(key, 0)
            self.seq[key] = s + 1
            batch.append((key.encode(), json.dumps({"key": key, "seq": s, "payload": "p"}).encode(), None))
        self.system.produce(self.stream, pack(batch) if pack else batch)
        self.total += n


def job(
    home: Home,
    name: str,
    factor: int,
    *,
    stream: str = "events",
    latency_ms: float = 0,
    max_records: int = 500,
    start: str = "earliest",
) -> JobConfig:
    base = JobConfig.load(DEMO).to_dict()
    base.update(
        name=name,
        inputs=[{"system": "deltalog", "stream": stream}],
        elasticity_factor=factor,
        process_options={"latency_ms": latency_ms},
        sink={"table": f"{name}_out"},
        dead_letter={"table": f"{name}_dead"},
        batch={"max_records": max_records, "trigger_interval": "0 seconds"},
        start=start,
    )
    config = JobConfig.from_dict(base)
    create_job(home, config)
    return config


def sink(home: Home, config: JobConfig) -> pd.DataFrame:
    return read_delta(home.sinks / config.sink_table).to_pandas()


def dead_letters(home: Home, config: JobConfig) -> pd.DataFrame:
    return read_delta(home.sinks / config.dead_letter_table).to_pandas()


def order_violations(rows: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Keys whose rows, in the order the sink received them, do not follow the producer's per-key seq."""
    bad = []
    for key, group in rows.sort_values(["model_version", "batch_id", "task_seq"]).groupby("event_key", sort=False):
        seqs = group["seq"].tolist()
        for a, b in itertools.pairwise(seqs):
            if b <= a:
                bad.append((key, a, b))
    return bad


def misrouted(rows: pd.DataFrame, factor: int) -> pd.DataFrame:
    if factor == 1:
        return rows[rows["key_bucket"].notna()]
    expected = [key_bucket(k, o, factor) for k, o in zip(rows["key"], rows["offset"], strict=True)]
    return rows[rows["key_bucket"] != pd.Series(expected, index=rows.index)]
