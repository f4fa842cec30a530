"""What a store reflects of its stream after one segment (``StoreState``), and its last bootstrap.

Stored as JSON in each segment's and snapshot's meta row, committed together
with the data, so the positions a store claims always match its changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pipelines.core.adjunct import Generations
from pipelines.errors import StoreError
from pipelines.systems.base import Position

FORMAT = 1


@dataclass(frozen=True)
class Bootstrap:
    """The last bootstrap of a store: when, from where to where, how much."""

    started_at: str
    finished_at: str | None
    start: Mapping[int, Position]
    target: Mapping[int, Position]
    changes: int = 0
    seconds: float = 0.0
    kind: str = "full"
    """``full``: from the stream's beginning (forced); ``catch-up``: from the last offset to the end."""

    def to_json(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "start": {str(p): v for p, v in sorted(self.start.items())},
            "target": {str(p): v for p, v in sorted(self.target.items())},
            "changes": self.changes,
            "seconds": round(self.seconds, 3),
            "kind": self.kind,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Bootstrap | None:
        if not value:
            return None
        return cls(
            started_at=value["started_at"],
            finished_at=value.get("finished_at"),
            start={int(p): v for p, v in value.get("start", {}).items()},
            target={int(p): v for p, v in value.get("target", {}).items()},
            changes=int(value.get("changes", 0)),
            seconds=float(value.get("seconds", 0.0)),
            kind=value.get("kind", "full"),
        )


@dataclass(frozen=True)
class StoreState:
    """A store after one segment: what it reflects of its stream. Stored as the segment's meta row."""

    job: str
    store: str
    incarnation: str
    seq: int
    positions: Mapping[int, Position]
    root: int
    fingerprint: Mapping[str, str]
    persistence: str
    created_at: str
    written_at: str
    generations: Generations = field(default_factory=Generations)
    serving: int = 0
    changes: int = 0
    total_changes: int = 0
    last_bootstrap: Bootstrap | None = None
    recovery: str = ""
    origin: Mapping[int, Position] = field(default_factory=dict)
    """Where this incarnation started reading each partition (a partition added later starts at its earliest)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "job": self.job,
                "store": self.store,
                "incarnation": self.incarnation,
                "seq": self.seq,
                "positions": {str(p): v for p, v in sorted(self.positions.items())},
                "root": self.root,
                "fingerprint": dict(self.fingerprint),
                "persistence": self.persistence,
                "created_at": self.created_at,
                "written_at": self.written_at,
                "generations": self.generations.to_json(),
                "serving": self.serving,
                "changes": self.changes,
                "total_changes": self.total_changes,
                "last_bootstrap": None if self.last_bootstrap is None else self.last_bootstrap.to_json(),
                "recovery": self.recovery,
                "origin": {str(p): v for p, v in sorted(self.origin.items())},
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> StoreState:
        value = json.loads(text)
        if value.get("format") != FORMAT:
            raise StoreError(f"store state has format {value.get('format')!r}; this version reads {FORMAT}")
        return cls(
            job=value["job"],
            store=value["store"],
            incarnation=value["incarnation"],
            seq=int(value["seq"]),
            positions={int(p): v for p, v in value["positions"].items()},
            root=int(value["root"]),
            fingerprint=dict(value["fingerprint"]),
            persistence=value["persistence"],
            created_at=value["created_at"],
            written_at=value["written_at"],
            generations=Generations.from_json(value.get("generations")),
            serving=int(value.get("serving", 0)),
            changes=int(value.get("changes", 0)),
            total_changes=int(value.get("total_changes", 0)),
            last_bootstrap=Bootstrap.from_json(value.get("last_bootstrap")),
            recovery=value.get("recovery", ""),
            origin={int(p): v for p, v in value.get("origin", {}).items()},
        )

    def next(self, **changes: Any) -> StoreState:
        return replace(self, **changes)
