"""Detecting repartitioned inputs: what ``repartition_watch`` and its input watcher compare.

A job's active model records how many partitions each input had when it was
planned; the input system says how many it has now. A growth to a multiple
is absorbed by the next model with the job's grouper in its SEP-5 form
(``expansion_grouper``: after N → kN, partition p's keys stay with the task of
p mod N, the task count and names do not change, and the new
partitions are held back until their source partitions are read past the
expansion point). A shrink, or a growth to a non-multiple, cannot be absorbed
without breaking key-to-task stability or losing unread records: it is
reported with a clear error and the job stays on its model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock, dead_process_owner
from pipelines.core.groupers import check_partition_change
from pipelines.core.input_watch import Finding
from pipelines.errors import PartitionChangeError, PipelinesError
from pipelines.jobs.config import job_config
from pipelines.operations import scaling
from pipelines.operations.scaling.operation import ScalingRequest, expansion_request, reshard_request
from pipelines.storage.home import Home
from pipelines.systems.base import SupportsRelayout
from pipelines.systems.registry import JobSystems


@dataclass(frozen=True)
class InputChange:
    job: str
    stream: str  # "system/stream"
    before: int
    after: int
    error: str | None = None  # why it cannot be absorbed; None: absorb it
    busy: str | None = None  # another scaling operation holds the job's lock: look again next time
    grouper: str = "GroupByPartition"  # the active model's
    relayout: bool = False  # the system places its shards on any slot count itself (Kinesis after a reshard)
    version: int | None = None  # the active model it was compared with: the absorption is planned again if it moved

    def request(self) -> ScalingRequest:
        if self.relayout:
            return reshard_request(self.job, self.stream, self.before, self.after, self.version)
        return expansion_request(self.job, self.stream, self.before, self.after, self.grouper, self.version)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def detect(home: Home, jobs: list[str] | None = None) -> list[InputChange]:
    """Every input whose partition count differs from its job's active model, one entry per (job, input)."""
    control = ControlPlane(home)
    lock = ScalingLock(home)
    changes = []
    for job in jobs if jobs is not None else control.job_models.jobs():
        try:
            model = control.job_models.active(job)
        except PipelinesError:
            continue  # planned but never activated: nothing runs, nothing to absorb
        planned = model.partitions()
        config = job_config(model)
        with JobSystems(home, config.systems) as systems:
            now = {s: systems.of(s.system).describe(s.stream).partition_count for s in config.inputs}
            # A Kinesis stream's partitions are slots: any new count is one slot per open shard, laid out by the
            # system from the checkpoints (``relayout``), so the job's grouper and key-task stability do not apply.
            slotted = {s for s in config.inputs if isinstance(systems.of(s.system), SupportsRelayout)}
        for stream in config.inputs:
            before = planned.get(stream)
            after = now[stream]
            if before is None or before == after:
                continue
            error = None
            try:
                if stream not in slotted:
                    check_partition_change({stream: before}, {stream: after}, fixed_task_num=True)
            except PartitionChangeError as e:
                error = str(e)
            state = lock.state(job)
            # A holder known dead (same host, pid gone) does not make the job busy: absorbing takes its lock over.
            holder = state if state is not None and state.held and not dead_process_owner(state.owner) else None
            busy = holder.describe() if holder is not None else None
            name = f"{stream.system}/{stream.stream}"
            changes.append(
                InputChange(job, name, before, after, error, busy, model.grouper, stream in slotted, model.version)
            )
    return changes


def settle_unchanged(home: Home, changes: list[InputChange], say: scaling.Say = print) -> list[str]:
    """Close what a killed absorption left on jobs this look finds nothing to absorb in; the settled event ids.

    Killed after it activated the new model, an absorption leaves the next
    look nothing to absorb, but its lock (held for a lease) and its open
    event: the job would look mid-scale and refuse rescales for 15 minutes.
    As a rescale that finds nothing to change does, the watch settles them;
    only holders known dead (a CLI process of this host that is gone).
    """
    absorbing = {c.job for c in changes if c.error is None and c.busy is None}
    settled: list[str] = []
    for job in ControlPlane(home).job_models.jobs():
        if job not in absorbing:
            settled += scaling.settle_abandoned(home, job, say=say)
    return settled


def findings(home: Home) -> list[Finding]:
    """What a look of the input watcher finds to do: an absorption, a refusal to say, a dead holder's lock to settle.

    A change whose job's lock is held by a live operation is not one yet (that
    operation ends first, and the next look finds the change again or not); a
    lock held by a process known dead, on a job with nothing to absorb, is what
    ``settle_unchanged`` closes. Each key names what would make it new: the
    change and the model it was compared with, or the dead holder.
    """
    changes = detect(home)
    found = [
        Finding(
            f"{c.job}: {c.stream} {c.before} -> {c.after} on v{c.version}: {'refused' if c.error else 'absorb'}",
            again=c.error is None,
        )
        for c in changes
        if c.busy is None
    ]
    absorbing = {c.job for c in changes if c.error is None and c.busy is None}
    lock = ScalingLock(home)
    for job in ControlPlane(home).job_models.jobs():
        state = lock.state(job)
        if job not in absorbing and state is not None and state.held and dead_process_owner(state.owner):
            found.append(Finding(f"{job}: settle what {state.owner} left", again=True))
    return found
