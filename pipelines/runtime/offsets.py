"""Spark's offsets for the elastic source: every (SSP, key bucket)'s position, as JSON Spark can compare.

A micro-batch's end offsets are exactly the checkpoints the sink appends when
it commits the batch, so an offset is either a position the input system
named, or a ``Pending`` end: a ``Bounded`` read ("at most N records after
this position") the system can only end by reading, with the id of the pin
its first read will write (``pipelines.runtime.fetch``). Spark keeps the end
offsets of a batch in its offset log and replays the batch with the same
JSON, so the pin id, and thus the records, are the same on a replay.

SSPs are keyed by their one wire form (``SystemStreamPartition.wire``);
Spark compares offsets as JSON text, so keys are sorted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.core.positions import Bounded, Position
from pipelines.core.ssp import SystemStreamPartition


@dataclass(frozen=True)
class Pending:
    """An end not known until the first read of it: where the read starts, how many records at most, its pin."""

    bounded: Bounded
    pin: str

    @classmethod
    def new(cls, bounded: Bounded) -> Pending:
        return cls(bounded, uuid.uuid4().hex)

    def to_json(self) -> dict[str, Any]:
        return {**self.bounded.to_json(), "pin": self.pin}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Pending:
        return cls(Bounded.from_json(value), str(value["pin"]))


Offset = Position | Pending


@dataclass(frozen=True)
class BatchOffsets:
    """The offsets of one model version's query: a position (or a pending end) per SSP and key bucket."""

    model: int
    positions: Mapping[SystemStreamPartition, Offset]

    def to_json(self) -> dict[str, Any]:
        items = sorted((ssp.wire(), value) for ssp, value in self.positions.items())
        return {
            "model": self.model,
            "offsets": {k: v.to_json() if isinstance(v, Pending) else v for k, v in items},
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> BatchOffsets:
        positions: dict[SystemStreamPartition, Offset] = {}
        for key, raw in value["offsets"].items():
            positions[SystemStreamPartition.from_wire(key)] = Pending.from_json(raw) if isinstance(raw, dict) else raw
        return cls(int(value["model"]), positions)


def encode(offsets: BatchOffsets) -> dict[str, Any]:
    """The JSON-ready dict Spark stores; deterministic for equal offsets."""
    encoded: dict[str, Any] = json.loads(json.dumps(offsets.to_json(), sort_keys=True))
    return encoded
