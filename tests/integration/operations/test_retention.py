"""``stream trim`` against the jobs of the home: what each job and each adjunct store has not read stays."""

from __future__ import annotations

import time

from pipelines.control import ControlPlane
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.ssp import SystemStreamPartition
from pipelines.operations.jobs import create_job
from pipelines.operations.retention import Reader, trim_stream
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from ..adjunct.test_job import config as store_job
from ..runtime.jobs import job, produce


def _stand_at(home: Home, name: str, ends: dict[int, int]) -> None:
    """The job's checkpoints after a batch that read up to ``ends`` (factor 1: a bucket per partition)."""
    control = ControlPlane(home)
    version = control.job_models.active_version(name)
    assert version is not None
    offsets = {SystemStreamPartition("deltalog", "events", p): str(e) for p, e in ends.items()}
    control.checkpoints.write(name, version, CheckpointMap(1, offsets), batch_id=0)


def test_a_trim_keeps_what_each_job_and_store_has_not_read_unless_told_to_lose_it(home: Home) -> None:
    log = DeltaLog(home.streams)
    ends = []
    for _ in range(3):  # three commits: three files per partition
        produce(home, "events", 40, 8)
        ends.append(log.end_offsets("events"))
    log.create("customers", 2)
    log.produce("customers", [(f"key-{i}".encode(), b"name", None) for i in range(16)])
    log.produce("customers", [(f"key-{i}".encode(), b"renamed", None) for i in range(16)])
    job(home, "slow", 1)
    stores = {
        "owned": {"input": "customers", "partitioning": "partitioned", "bootstrap": True},
        "catchup": {"input": "customers", "partitioning": "partitioned"},
    }
    create_job(home, store_job("stores", stores))  # reads events; customers feeds its stores
    time.sleep(0.02)
    now = int(time.time() * 1000)

    done, readers = trim_stream(home, "events", now)
    assert {r.name for r in readers} == {"slow", "stores"}
    assert done.files == 0 and {p.stop for p in done.partitions} == {"unread"}, "both jobs start at 0"

    _stand_at(home, "slow", ends[0])  # read the first commit
    _stand_at(home, "stores", ends[1])  # read two
    planned, _ = trim_stream(home, "events", now, dry_run=True)
    assert [p.earliest for p in planned.partitions] == [ends[0][p] for p in range(2)], "the slower job holds it"
    assert log.describe("events").partitions[0].earliest == "0", "a dry run changes nothing"
    done, _ = trim_stream(home, "events", now)
    assert {int(p): int(m.earliest) for p, m in log.describe("events").partitions.items()} == ends[0]
    assert done.records == sum(ends[0].values()) and all(p.stop == "unread" for p in done.partitions)

    # a store marked bootstrap reads its stream from the beginning when it is re-created (a memory store at every
    # start), and a store that has not committed yet from its start: each holds all of it
    held, readers = trim_stream(home, "customers", now)
    assert held.files == 0 and sorted(readers, key=lambda r: str(r.store)) == [
        Reader("stores", "catchup", {0: 0, 1: 0}, bootstraps=False),
        Reader("stores", "owned", {0: 0, 1: 0}, bootstraps=True),
    ]

    # the operator's explicit loss: only the last file of each partition stays; the jobs stop until skip-lost
    lost, _ = trim_stream(home, "events", now, lose_unread=True)
    assert all(p.stop == "last file" for p in lost.partitions)
    assert {int(p): int(m.earliest) for p, m in log.describe("events").partitions.items()} == ends[1]

    # partitions an expansion added after the jobs' models: they will read them from the start once they absorb it
    log.expand("events", 4)
    for _ in range(2):
        produce(home, "events", 40, 8)
    time.sleep(0.02)
    grown, _ = trim_stream(home, "events", int(time.time() * 1000))
    new = [p for p in grown.partitions if p.partition >= 2]
    assert [(p.files, p.stop, p.unread_from) for p in new] == [(0, "unread", 0)] * 2, new
