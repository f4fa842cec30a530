"""Verify a job against its input: the checks of ``checks`` over what the control plane says was read."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from pipelines.backoff import Backoff
from pipelines.control import ControlPlane
from pipelines.core import state as rules
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.core.start import EARLIEST
from pipelines.core.state import StateSpec
from pipelines.deltaio import open_if_table, read_delta
from pipelines.errors import PipelinesError
from pipelines.jobs.config import job_config
from pipelines.quality.checks import (
    INPUT_ORDER,
    Verdict,
    check_sequence,
    expected_records,
    verify_rows,
    with_input_order,
)
from pipelines.quality.state_check import StateVerdict, applied_records, state_flags
from pipelines.storage.home import Home
from pipelines.systems.base import SupportsRecordsRead
from pipelines.systems.registry import JobSystems


@dataclass
class Window:
    """What one validation covers: the input records it must account for and the sink rows it judges.

    A *run* window is the whole job: every input record from each partition's earliest offset (a job created
    with another ``start``: from version 1's start checkpoints) up to the active model's committed checkpoints,
    and every sink and dead-letter row. An *event* window is the
    batches around one scaling event: the records from the old model's start checkpoints up to the new
    model's committed checkpoints, and the rows both model versions wrote.

    ``unread`` (run windows only): records in input partitions that no task
    of the active model reads, as ``stream/partition`` -> count. They are in
    no checkpoint, so the other checks cannot see them; left alone (a watch
    that never absorbs an expansion) they would never reach the sink.
    """

    job: str
    window_id: str
    expected: pd.DataFrame
    rows: pd.DataFrame
    dead: pd.DataFrame
    factors: dict[int, int]
    unread: dict[str, int] = field(default_factory=dict)
    version: int | None = None
    gone: dict[str, int] = field(default_factory=dict)
    """Sink rows of records the input no longer holds (retention removed them after they were read), as
    ``stream/partition`` -> count: outside what the window can account for, and no sign of a fault."""
    keyed: pd.DataFrame | None = None
    """A stateful job's every input record up to the committed checkpoints (stream, partition, offset, key,
    input_order), from the job's start whatever the window: a state counts them all."""
    states: dict[str, pd.DataFrame] = field(default_factory=dict)
    """Each state's rows as of the batch of the committed checkpoints (``pipelines.state.inspect.state_at``)."""
    state_specs: tuple[StateSpec, ...] = ()
    trimmed: bool = False
    """The input no longer holds records the job read (retention): the state check counts nothing then."""
    all_dead: pd.DataFrame | None = None
    """Every dead letter of the job (a state counts the records of the whole run, less these)."""
    slotted: frozenset[str] = frozenset()
    """Input streams whose positions name their own unit of order (a Kinesis record's shard) and whose partitions
    are slots that change hands across re-layouts: the state check tells their records apart by position alone."""

    def state_checks(self) -> list[tuple[StateVerdict, pd.DataFrame]]:
        """Each state's verdict and per-key frame (``quality.state_check``); none for a job without state."""
        if self.keyed is None:
            return []
        dead = self.all_dead if self.all_dead is not None else self.dead
        applied = applied_records(_unslotted(self.keyed, self.slotted), _unslotted(dead, self.slotted))
        out = []
        for spec in self.state_specs:
            rows = self.states[spec.name]
            for stream, partition in (rules.FIRST[:2], rules.LAST[:2]):
                rows = _unslotted(rows, self.slotted, stream, partition)
            frame, verdict = state_flags(spec.name, applied, rows, ttl=spec.ttl_s is not None, counted=not self.trimmed)
            out.append((verdict, frame))
        return out


_READ_AGAIN = Backoff(base_s=0.0, cap_s=0.0)
"""A window whose state moved on is read again at once: nothing is contended, the newer snapshot is there."""


def load_window(home: Home, job: str, event: str | None = None) -> Window:
    """The window's frames; a stateful job's are read again when its state moved past them meanwhile (a compaction
    of a running job retired the changes the check needed)."""
    from pipelines.state.inspect import StateMovedOn

    return _READ_AGAIN.retry(
        lambda: _load_window(home, job, event), attempts=3, retriable=lambda e: isinstance(e, StateMovedOn)
    )


def _load_window(home: Home, job: str, event: str | None = None) -> Window:
    control = ControlPlane(home)
    model = control.job_models.active(job)
    config = job_config(model)
    factors = {int(h["version"]): int(h["factor"]) for h in control.job_models.history(job) if h["event"] == "planned"}
    if event is None:
        versions = None
        last = model.version
        start_rows: dict[SystemStreamPartition, str] = {}
        if config.start != EARLIEST:  # the records before version 1's start were never the job's
            start_rows = control.checkpoints.start(job, min(factors, default=model.version))
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
        latest, cut = control.checkpoints.latest_with_batch(job, last)
        committed = systems.floors(latest.offsets.items())
        states = {}
        if config.state:  # as of the same batch: the state commits with the sink, before the checkpoints
            from pipelines.state.inspect import state_at

            for spec in config.state:
                states[spec.name] = state_at(home, job, spec, (last, cut)).to_pandas()
        rows = _table(home, config.sink_table)
        dead = _table(home, config.dead_letter_table)
        all_dead = dead
        if versions is not None:
            rows = rows[rows["model_version"].isin(versions)]
            dead = dead[dead["model_version"].isin(versions)]
        parts = []
        keyed: list[pd.DataFrame] = []
        stateful = bool(config.state)
        run_starts = _first_starts(control, job, factors, systems) if stateful else {}
        trimmed = False
        read_by_model = {ssp.whole() for task in model.tasks() for ssp in task.ssps}
        unread: dict[str, int] = {}
        earliest: dict[tuple[str, int], str] = {}
        slotted: set[str] = set()
        for stream in config.inputs:
            system = systems.of(stream.system)
            if isinstance(system, SupportsRecordsRead):
                slotted.add(stream.stream)
                parts += _records_read(system, stream, starts, committed, rows, dead)
                if stateful:  # slots: from the job's start (or its start time, which the slots keep)
                    keyed.append(_keyed_read(system, stream, starts if config.start != EARLIEST else {}, committed))
                continue
            for p, part in system.describe(stream.stream).partitions.items():
                ssp = SystemStreamPartition(stream.system, stream.stream, p)
                earliest[stream.stream, p] = part.earliest
                if event is None and ssp not in read_by_model:
                    waiting = system.records_between(stream.stream, p, part.earliest, part.end)
                    if waiting is not None and waiting > 0:  # None: a system that cannot count (none reaches here)
                        unread[f"{stream.stream}/{p}"] = waiting
                    continue
                start = part.earliest
                if ssp in starts and system.position_key(starts[ssp]) > system.position_key(start):
                    start = starts[ssp]
                end = committed.get(ssp)
                if stateful:
                    began = run_starts.get(ssp)
                    trimmed |= began is not None and system.position_key(part.earliest) > system.position_key(began)
                    keyed.append(_keyed_range(system, stream.stream, p, part.earliest, began, end))
                if end is None or system.position_key(end) <= system.position_key(start):
                    continue
                read = system.read(stream.stream, p, start, end, columns=["offset"])
                parts.append((stream.stream, p, read.records.column("offset").to_pylist()))
        order = {s.stream: systems.of(s.system).position_key for s in config.inputs}
        rows = with_input_order(rows, order.__getitem__)
    expected = expected_records(parts)
    gone = _no_longer_held(rows, earliest, order)
    window = Window(job, window_id, expected, rows, dead, factors, unread, model.version, gone)
    if stateful:
        frames = [f for f in keyed if len(f)]
        records = pd.concat(frames, ignore_index=True) if frames else _empty_keyed()
        window.keyed = with_input_order(records, order.__getitem__)
        window.states, window.state_specs, window.all_dead = states, config.state, all_dead
        window.slotted = frozenset(slotted)
        window.trimmed = trimmed or bool(gone)
    return window


def _unslotted(
    frame: pd.DataFrame, slotted: frozenset[str], stream: str = "stream", partition: str = "partition"
) -> pd.DataFrame:
    """``frame`` with the partition of a slotted stream's records set to -1: a Kinesis record's slot is the one
    that read it, which a re-layout changes, while its position (shard and sequence) is its identity and its
    order (``Window.slotted``)."""
    if not slotted or frame.empty:
        return frame
    mask = frame[stream].isin(slotted)
    if not mask.any():
        return frame
    return frame.assign(**{partition: frame[partition].astype("Int64").mask(mask, -1)})


def _empty_keyed() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "stream": pd.Series(dtype=str),
            "partition": pd.Series(dtype="int32"),
            "offset": pd.Series(dtype=str),
            "key": pd.Series(dtype=object),
        }
    )


def _keyed_range(
    system: Any, stream: str, partition: int, earliest: str, start: str | None, end: str | None
) -> pd.DataFrame:
    """A partition's records (with keys) from the job's start up to ``end``: what its states have counted."""
    begin = earliest
    if start is not None and system.position_key(start) > system.position_key(begin):
        begin = start
    if end is None or system.position_key(end) <= system.position_key(begin):
        return _empty_keyed()
    read = system.read(stream, partition, begin, end, columns=["offset", "key"])
    table = read.records
    return pd.DataFrame(
        {
            "stream": stream,
            "partition": partition,
            "offset": table.column("offset").to_pylist(),
            "key": table.column("key").to_pylist(),
        }
    )


def _keyed_read(
    system: SupportsRecordsRead,
    stream: SystemStream,
    starts: Mapping[SystemStreamPartition, str],
    committed: Mapping[SystemStreamPartition, str],
) -> pd.DataFrame:
    """Every record a slotted system's readers read (with keys and the slot that read it) from the job's start."""

    def of_stream(positions: Mapping[SystemStreamPartition, str]) -> dict[int, str]:
        return {s.partition: o for s, o in positions.items() if s.system_stream == stream}

    found = system.records_read_keyed(stream.stream, of_stream(starts), of_stream(committed))
    return pd.DataFrame(
        {
            "stream": stream.stream,
            "partition": [-1 if slot is None else slot for slot, _, _ in found],
            "offset": [position for _, position, _ in found],
            "key": [key for _, _, key in found],
        }
    )


def _first_starts(control: ControlPlane, job: str, versions: Iterable[int], systems: JobSystems) -> dict[Any, str]:
    """Where the job began reading each partition: its start in the first model version that read it (version 1's
    start, or the earliest position when an expansion added it). A state counts every record from there."""
    first: dict[Any, str] = {}
    for version in sorted(versions):
        for ssp, position in systems.floors(control.checkpoints.start(job, version).items()).items():
            first.setdefault(ssp, position)
    return first


def verify_job(home: Home, job: str, *, sequence: str | None = None, event: str | None = None) -> Verdict:
    """Every input record of the window (the whole run, or one scaling event's) must be in the sink or dead
    letters, once, in per-key order, and routed to its bucket's virtual task."""
    w = load_window(home, job, event)
    verdict = verify_rows(w.expected, w.rows, w.dead, w.factors.__getitem__, sequence)
    verdict.gone = sum(w.gone.values())
    verdict.states = [v for v, _ in w.state_checks()]
    return verdict.with_unread(w.unread, w.version)


def _no_longer_held(
    rows: pd.DataFrame, earliest: Mapping[tuple[str, int], str], order: Mapping[str, Callable[[str], Any]]
) -> dict[str, int]:
    """Rows whose records lie before their partition's earliest position (the input no longer holds them), per
    partition: none can be in the window. Only a partition whose first row is before its earliest is looked at
    row by row, so a window of a clean input costs one group-by."""
    if rows.empty or not earliest:
        return {}
    firsts = rows.loc[rows.groupby(["stream", "partition"], sort=True)[INPUT_ORDER].idxmin()]
    gone: dict[str, int] = {}
    for stream, partition, offset in firsts[["stream", "partition", "offset"]].itertuples(index=False):
        first = earliest.get((str(stream), int(partition)))
        key = order[str(stream)]
        if first is None or not key(str(offset)) < key(first):
            continue
        mine = rows.loc[(rows["stream"] == stream) & (rows["partition"] == partition), "offset"].astype(str)
        gone[f"{stream}/{partition}"] = sum(1 for o in mine if key(o) < key(first))
    return gone


def _records_read(
    system: SupportsRecordsRead,
    stream: SystemStream,
    starts: Mapping[SystemStreamPartition, str],
    committed: Mapping[SystemStreamPartition, str],
    rows: pd.DataFrame,
    dead: pd.DataFrame,
) -> list[tuple[str, int, list[str]]]:
    """Input records of a system whose partitions are not ranges of positions (Kinesis slots over shards).

    The system lists what its readers read between the checkpoints; each
    record is expected under the partition the sink holds it under, or, when
    the sink does not have it (it is reported lost), the partition the
    checkpoints say should have read it (-1 when they no longer say).
    """

    def of_stream(positions: Mapping[SystemStreamPartition, str]) -> dict[int, str]:
        return {s.partition: o for s, o in positions.items() if s.system_stream == stream}

    seen = pd.concat([rows[["stream", "partition", "offset"]], dead[["stream", "partition", "offset"]]])
    seen = seen[seen["stream"] == stream.stream]
    slot_of = dict(zip(seen["offset"].astype(str), seen["partition"].astype(int), strict=True))
    by_partition: dict[int, list[str]] = {}
    for partition, offset in system.records_read(stream.stream, of_stream(starts), of_stream(committed)):
        # A shard moves between slots when the job switches models after a reshard, so the slot that read a
        # record is the one the sink holds it under; the checkpoints' slot only names where a lost one was due.
        p = slot_of.get(offset, -1 if partition is None else partition)
        by_partition.setdefault(p, []).append(offset)
    return [(stream.stream, p, offsets) for p, offsets in sorted(by_partition.items())]


def check_output_sequence(home: Home, job: str, sequence: str) -> None:
    """A rescale's ``--sequence`` checked against the sink's columns before anything changes: its verification
    is the operation's last step, after the new model is active and the job restarted."""
    config = job_config(ControlPlane(home).job_models.active(job))
    dt = open_if_table(home.sinks / config.sink_table)
    if dt is not None:
        check_sequence(pa.schema(dt.schema().to_arrow()).empty_table().to_pandas(), sequence)


def _table(home: Home, name: str) -> pd.DataFrame:
    return read_delta(home.sinks / name).to_pandas()
