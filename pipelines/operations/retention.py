"""Trimming an embedded-log stream without taking records from the jobs of the home that still have to read them.

Kafka's retention deletes by age alone, and a consumer that fell behind finds
the records gone; here the home knows every job that reads the stream and
where each stands, so ``trim_stream`` holds each partition back at the
slowest of them by default: the job's checkpoints of its active model (the
slowest key bucket) and each adjunct store the stream feeds. A store marked
``bootstrap`` holds the whole stream: it reads it again from the beginning
whenever it is re-created (a memory store at every start), so its stream is
a changelog to keep whole, as Kafka keeps such topics compacted rather than
time-retained; so does a store that has not committed yet. ``lose_unread``
is the operator's explicit "take them anyway", and the jobs it stops then
fail naming the partition and offset until ``job skip-lost``
(``operations.lost``). See docs/systems/deltalog.md, "Retention".
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.control import ControlPlane, Home
from pipelines.core.ssp import SystemStream
from pipelines.systems.deltalog import DeltaLog
from pipelines.systems.deltalog.layout import SYSTEM
from pipelines.systems.deltalog.retention import Trim


@dataclass(frozen=True)
class Reader:
    """A job, or one adjunct store of it, that reads the stream: the first offset it has still to read, per
    partition."""

    job: str
    store: str | None
    unread_from: dict[int, int]
    bootstraps: bool = False  # a store that may read the stream from the beginning again

    @property
    def name(self) -> str:
        if self.store is None:
            return self.job
        return f"{self.job} (store {self.store}{', bootstraps' if self.bootstraps else ''})"


def readers(home: Home, stream: str, partitions: int) -> list[Reader]:
    """Every job of the home whose active model reads ``stream``, or whose adjunct store it feeds."""
    from pipelines.adjunct.checkpoints import read_store_checkpoints
    from pipelines.adjunct.runtime import job_stores
    from pipelines.jobs.config import job_config

    control = ControlPlane(home)
    wanted = SystemStream(SYSTEM, stream)
    found: list[Reader] = []
    for job in control.job_models.jobs():
        if control.job_models.active_version(job) is None:
            continue
        model = control.job_models.active(job)
        config = job_config(model)
        if wanted in config.inputs:
            slowest: dict[int, int] = {}
            for ssp, position in control.checkpoints.latest(job, model.version).offsets.items():
                if ssp.system_stream == wanted:
                    slowest[ssp.partition] = min(int(position), slowest.get(ssp.partition, int(position)))
            found.append(Reader(job, None, _from_start(slowest, partitions)))
        stores = [s for s in job_stores(config) if s.input == wanted]
        if stores:
            checkpoints = read_store_checkpoints(home, job)
            for store in stores:
                cp = checkpoints.get(store.name)
                if store.bootstrap or cp is None or (cp.system, cp.stream) != (SYSTEM, stream):
                    positions = dict.fromkeys(range(partitions), 0)  # it will read the stream from its start
                else:
                    positions = _from_start({p: int(pos) for p, pos in cp.positions.items()}, partitions)
                found.append(Reader(job, store.name, positions, store.bootstrap))
    return found


def _from_start(positions: dict[int, int], partitions: int) -> dict[int, int]:
    """A partition a reader has no position for yet (one an expansion added after its model or its store's last
    commit) is one it will read from its start once it absorbs the expansion: held whole until then."""
    return {p: positions.get(p, 0) for p in range(max(partitions, max(positions, default=-1) + 1))}


def trim_stream(
    home: Home, stream: str, before_ms: int, *, lose_unread: bool = False, dry_run: bool = False
) -> tuple[Trim, list[Reader]]:
    """The trim (done, or planned with ``dry_run``) and the readers that held it back (or would have)."""
    log = DeltaLog(home.streams)
    try:
        partitions = len(log.describe(stream).partitions)
        found = readers(home, stream, partitions)
        unread: dict[int, int] = {}
        if not lose_unread:
            for reader in found:
                for p, first in reader.unread_from.items():
                    unread[p] = min(first, unread.get(p, first))
        return log.trim(stream, before_ms, unread, dry_run=dry_run), found
    finally:
        log.close()


def kept_from(trim: Trim, readers: list[Reader], partition: int) -> str:
    """Why a partition kept what it kept: ``newer``, ``last file``, ``empty``, or the readers holding it."""
    part = next(p for p in trim.partitions if p.partition == partition)
    if part.stop != "unread" or part.unread_from is None:
        return part.stop
    names = [r.name for r in readers if r.unread_from.get(partition) == part.unread_from]
    return f"unread by {', '.join(names)} (from {part.unread_from})"
