"""Each input of a job as its users know it, asked through the ``InputSystem`` protocol, time-limited.

* every input: its partitions with earliest and end positions, where the job
  stands (its slowest key bucket per partition) and the records behind where
  the system can count them, the expansion history, and which partitions an
  expansion holds back now (``read_limits``, the same answer the source plans
  with);
* Kafka: the topic and the job's consumer group (``consumer_group``, default
  the job's name) with its committed offsets and lag, which is what Kafka's
  own tools show (``KafkaSystem.committed``; the sink commits the group after
  every batch through ``acknowledge``);
* Kinesis: the job's slots (the SSPs) with their shards, and every listed
  shard's lineage (parents, children, open or closed, the slot reading it and
  its state: reading, finished, waiting for parents) from
  ``KinesisSystem.lineage``; a slot still reading a closed parent whose
  children wait is reported as holding them back.

The two system-specific questions are optional abilities of those systems
(``SupportsCommitted``, ``SupportsLineage`` in ``pipelines.systems.base``),
asked with ``isinstance``: the core protocol needs no new method for a view.
An input that does not answer within ``TIMEOUT_S`` or raises is shown as
unreachable with the reason; the page never waits longer or fails for it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from pipelines.core.positions import Position
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem, StreamMetadata, SupportsCommitted, SupportsLineage
from pipelines.systems.registry import JobSystems

TIMEOUT_S = 3.0
HELD_BY_EXPANSION = "held back: its source partition is not read past the expansion point yet"


def inspect_inputs(
    home: Home,
    job: str,
    inputs: list[SystemStream],
    settings: Mapping[str, Mapping[str, Any]],
    checkpoints: Mapping[SystemStreamPartition, Position],
    timeout_s: float = TIMEOUT_S,
) -> tuple[list[dict[str, Any]], dict[SystemStreamPartition, str]]:
    """One view per input (in ``inputs`` order) and the held-back partitions (whole SSPs) with the reason.

    Each input is asked in a daemon thread: one that hangs past ``timeout_s``
    is reported and left behind, and cannot keep a CLI process from exiting.
    """
    answers: dict[SystemStream, tuple[bool, Any]] = {}

    def ask(stream: SystemStream) -> None:
        try:
            answers[stream] = (True, _inspect_one(home, job, stream, settings, checkpoints))
        except Exception as e:  # an input that cannot be asked is information, not a failed page
            answers[stream] = (False, f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=ask, args=(s,), name=f"observe-{s}", daemon=True) for s in inputs]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    views: list[dict[str, Any]] = []
    held: dict[SystemStreamPartition, str] = {}
    for stream in inputs:
        base = {"input": str(stream), "system": stream.system, "stream": stream.stream}
        answer = answers.get(stream)
        if answer is None:
            views.append({**base, "reachable": False, "error": f"no answer within {timeout_s:g} s"})
        elif not answer[0]:
            views.append({**base, "reachable": False, "error": answer[1]})
        else:
            view, stream_held = answer[1]
            views.append({**base, "reachable": True, **view})
            held.update(stream_held)
    return views, held


def _inspect_one(
    home: Home,
    job: str,
    stream: SystemStream,
    settings: Mapping[str, Mapping[str, Any]],
    checkpoints: Mapping[SystemStreamPartition, Position],
) -> tuple[dict[str, Any], dict[SystemStreamPartition, str]]:
    with JobSystems(home, settings) as systems:
        system = systems.of(stream.system)
        mine = [(s, p) for s, p in checkpoints.items() if s.system_stream == stream]
        floors = {s.partition: p for s, p in systems.floors(mine).items()}
        limits = system.read_limits(stream.stream, floors)
        held = {
            SystemStreamPartition(stream.system, stream.stream, p): HELD_BY_EXPANSION
            if limit is None
            else f"may be read up to {limit} only (an expansion point)"
            for p, limit in limits.items()
        }
        if isinstance(system, SupportsLineage):
            shards = system.lineage(stream.stream, floors)
            return _slots_view(stream, floors, shards, held), held
        meta = system.describe(stream.stream)
        partitions = []
        for p, info in sorted(meta.partitions.items()):
            floor = floors.get(p)
            behind = system.records_between(stream.stream, p, floor, info.end) if floor is not None else None
            whole = SystemStreamPartition(stream.system, stream.stream, p)
            partitions.append(
                {
                    "partition": p,
                    "earliest": info.earliest,
                    "end": info.end,
                    "checkpoint": floor,
                    "records_behind": behind,
                    "held": held.get(whole),
                    "read_by_job": floor is not None,
                    "files": info.details.get("files"),  # the embedded log's: when to 'pipelines stream compact'
                }
            )
        view: dict[str, Any] = {
            "partitions": partitions,
            "expansions": [_expansion(x) for x in meta.expansions],
            "details": dict(meta.details),
        }
        if isinstance(system, SupportsCommitted):
            view["consumer_group"] = _group(system, job, stream, settings, meta)
        return view, held


class _Committing(InputSystem, SupportsCommitted, Protocol):
    """An input system whose own tools keep a group's progress (Kafka): its lag is counted against its ends."""


def _group(
    system: _Committing,
    job: str,
    stream: SystemStream,
    settings: Mapping[str, Mapping[str, Any]],
    meta: StreamMetadata,
) -> dict[str, Any]:
    """The job's consumer group as Kafka's tools see it: committed offset and lag per partition."""
    own = dict(settings.get(stream.system) or {})
    group = own.get("consumer_group") or job
    positions = system.committed(group, stream.stream)
    rows = []
    total: int | None = 0
    for p, info in sorted(meta.partitions.items()):
        position = positions.get(p)
        lag = system.records_between(stream.stream, p, position, info.end) if position is not None else None
        total = None if lag is None or total is None else total + lag
        rows.append({"partition": p, "committed": position, "end": info.end, "lag": lag})
    return {
        "group": group,
        "commits_progress": bool(own.get("commit_progress", True)),
        "lag": total,
        "partitions": rows,
    }


def _slots_view(
    stream: SystemStream,
    floors: Mapping[int, Position],
    shards: Mapping[str, Mapping[str, Any]],
    held: dict[SystemStreamPartition, str],
) -> dict[str, Any]:
    """Kinesis: the job's slots (its partitions) with their shards, and every shard's lineage."""
    by_slot: dict[int, list[str]] = {}
    for shard, info in shards.items():
        if info.get("slot") is not None:
            by_slot.setdefault(int(info["slot"]), []).append(shard)
    for slot, names in by_slot.items():
        waiting = [
            (s, [c for c in shards[s].get("children", []) if shards.get(c, {}).get("state") == "waiting for parents"])
            for s in names
            if not shards[s].get("open") and shards[s].get("state") == "reading"
        ]
        reasons = [f"parent shard {s} not finished: children {', '.join(c)} wait" for s, c in waiting if c]
        if reasons:
            whole = SystemStreamPartition(stream.system, stream.stream, slot)
            held[whole] = "; ".join([held[whole], *reasons] if whole in held else reasons)
    slots = [
        {
            "partition": p,
            "checkpoint": floors[p],
            "shards": sorted(by_slot.get(p, [])),
            "held": held.get(SystemStreamPartition(stream.system, stream.stream, p)),
        }
        for p in sorted(floors)
    ]
    return {
        "partitions": slots,
        "shards": [{"shard": s, **dict(info)} for s, info in sorted(shards.items())],
        "lag_unit": "time (Kinesis cannot count records behind without reading them)",
    }


def _expansion(expansion: Any) -> dict[str, Any]:
    is_instance = dataclasses.is_dataclass(expansion) and not isinstance(expansion, type)
    raw = dataclasses.asdict(expansion) if is_instance else dict(vars(expansion))
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in raw.items()}
