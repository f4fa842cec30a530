"""The sink marker: what one virtual task tells the sink about its micro-batch.

Each task's last row carries one, through processing to the sink's commit on
the driver: the end position of each of its (SSP, key bucket)s (the batch's
checkpoints) and its counters (the metrics). Typed, and serialized once, so
the source that writes it, the processing step that adds to it and the sink
that reads it agree on every field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pipelines.core.positions import Position


@dataclass
class TaskMarker:
    task: str
    ends: dict[str, Position] = field(default_factory=dict)  # SSP wire -> the position after this batch
    records_in: int = 0  # records of the task's key buckets it was given
    keys_in: int = 0  # distinct keys among them (the skew test's sample)
    records_fetched: int = 0  # records this task fetched from the input system (0 when a sibling fetched)
    bytes_fetched: int = 0
    read_ns: int = 0
    key_hash_ns: int = 0
    wait_ns: int = 0  # waiting for a sibling's fetch of the same partition range
    records_processed: int = 0
    records_out: int = 0
    dead_letters: int = 0
    process_ns: int = 0
    stages: list[str] = field(default_factory=list)  # staging folders the task read (cleaned after the commit)
    stats: dict[str, float] = field(default_factory=dict)  # the input systems' own counters (e.g. throttles)
    stores: dict[str, Any] | None = None  # the adjunct store versions the batch was planned with (None: no stores)
    state: dict[str, Any] | None = None  # the state segments and time the batch was planned with (None: no state)
    state_files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # state -> its change files
    state_stats: dict[str, float] = field(default_factory=dict)  # figures of the task's states (metrics)

    def dumps(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> TaskMarker:
        raw: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})
