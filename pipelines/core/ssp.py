"""SystemStreamPartition: the unit of input, optionally narrowed to one key bucket.

One encoding everywhere. In job models an SSP is a JSON list: three parts
``[system, stream, partition]`` for a whole partition, four parts
``[system, stream, partition, key_bucket]`` for one key bucket of it (SEP-32,
"Public Interfaces"); three-part SSPs written before elasticity existed still
load, and so does Samza's object form. Where an SSP must be one string (keys
of Spark offsets, sink markers, the ``task`` column of per-partition metrics)
it is that same list as compact JSON (``wire``). In table rows, whose
``key_bucket`` column cannot hold "none", a whole partition's bucket is
``NO_BUCKET`` (-1): an ordinary value for SQL GROUP BY and pandas, never a
real bucket.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from pipelines.core.limits import shown
from pipelines.errors import ConfigError, ModelError

# Kafka topic names, Kinesis stream names and our embedded streams all fit this;
# it also keeps task names such as "SystemStreamPartition [a, b, 0]" unambiguous.
# "." and ".." are refused as Kafka's Topic.validate does: as a folder of the home
# they would name the streams' folder itself, or its parent.
NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._-]{1,249}$"
"""What a job, stream, table or store may be called (also the JSON schema's pattern)."""
_NAME = re.compile(NAME_PATTERN)


SYSTEMS = ("deltalog", "kafka", "kinesis")
"""The input systems a stream can be in (``pipelines.systems.registry`` opens each); named here, without the
systems' modules, so a name is checked before any of them (or the Delta libraries) loads."""

_SAMZA_KEYS = ("system", "stream", "partition", "keyBucket")
"""The fields of Samza's JSON form of an SSP (``SamzaObjectMapper``), ``keyBucket`` optional."""

NO_BUCKET = -1
"""The ``key_bucket`` column value of a whole partition (an SSP without a key bucket, factor 1)."""


def validate_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{kind} name {name!r} is invalid: use 1-249 characters of letters, digits, '.', '_' or '-', "
            "other than '.' or '..' alone"
        )
    return name


def validate_system(name: str) -> str:
    """An input system's name: one of ``SYSTEMS``, refused in the words ``registry.open_system`` uses."""
    if name not in SYSTEMS:
        raise ConfigError(f"unknown input system {shown(name)}; choose one of {', '.join(SYSTEMS)}")
    return name


@dataclass(frozen=True, order=True, slots=True)
class SystemStream:
    system: str
    stream: str

    def __str__(self) -> str:
        return f"{self.system}.{self.stream}"


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class SystemStreamPartition:
    """Ordered as Samza's ``compareTo``: system, stream, partition, then key bucket, the whole partition first."""

    system: str
    stream: str
    partition: int
    key_bucket: int | None = None

    def _order(self) -> tuple[str, str, int, int]:
        return (self.system, self.stream, self.partition, self.bucket_column)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, SystemStreamPartition):
            return NotImplemented
        return self._order() < other._order()

    @property
    def system_stream(self) -> SystemStream:
        return SystemStream(self.system, self.stream)

    def whole(self) -> SystemStreamPartition:
        """The partition this key bucket belongs to (itself if it has no bucket)."""
        if self.key_bucket is None:
            return self
        return SystemStreamPartition(self.system, self.stream, self.partition)

    def at_partition(self, partition: int) -> SystemStreamPartition:
        """Partition ``partition`` of the same stream, whole."""
        return SystemStreamPartition(self.system, self.stream, partition)

    def bucket(self, key_bucket: int) -> SystemStreamPartition:
        return SystemStreamPartition(self.system, self.stream, self.partition, key_bucket)

    def to_json(self) -> list[Any]:
        parts: list[Any] = [self.system, self.stream, self.partition]
        if self.key_bucket is not None:
            parts.append(self.key_bucket)
        return parts

    @classmethod
    def from_json(cls, value: Any) -> SystemStreamPartition:
        """Read a 3- or 4-part list, or Samza's dict form with optional ``keyBucket`` (-1 there: no key bucket)."""
        if isinstance(value, dict):
            unknown = sorted(shown(key) for key in value if key not in _SAMZA_KEYS)
            if unknown:  # a misspelt "keybucket" would read a key bucket as its whole partition
                raise ModelError(
                    f"SSP {shown(value)} has unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown[:5])}; "
                    f"Samza's form takes {', '.join(repr(k) for k in _SAMZA_KEYS)}"
                )
            try:
                bucket = value.get("keyBucket")
                value = [value["system"], value["stream"], value["partition"]] + (
                    [bucket] if bucket is not None and bucket != NO_BUCKET else []
                )
            except KeyError as missing:
                raise ModelError(f"SSP {shown(value)} lacks field {missing}") from None
        if not isinstance(value, list) or len(value) not in (3, 4):
            raise ModelError(f"SSP must be [system, stream, partition(, key_bucket)], got {shown(value)}")
        system, stream, partition, *rest = value
        if not isinstance(system, str) or not isinstance(stream, str):
            raise ModelError(f"SSP system and stream must be strings, got {shown(value)}")
        if not _is_index(partition) or (rest and not _is_index(rest[0])):
            raise ModelError(f"SSP partition and key bucket must be integers >= 0, got {shown(value)}")
        return cls(system, stream, partition, rest[0] if rest else None)

    def wire(self) -> str:
        """The SSP as one string: its JSON list, compact; the inverse of ``from_wire``."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_wire(cls, text: str) -> SystemStreamPartition:
        try:
            return cls.from_json(json.loads(text))
        except ValueError as e:
            if isinstance(e, ModelError):
                raise
            raise ModelError(f"SSP {text!r} is not a JSON list") from None

    @property
    def bucket_column(self) -> int:
        """The ``key_bucket`` column value of this SSP in a table row."""
        return NO_BUCKET if self.key_bucket is None else self.key_bucket

    @classmethod
    def from_columns(cls, system: str, stream: str, partition: int, key_bucket: int) -> SystemStreamPartition:
        """The SSP of a table row (``key_bucket`` is ``NO_BUCKET`` for a whole partition)."""
        return cls(system, stream, int(partition), None if key_bucket == NO_BUCKET else int(key_bucket))

    def __str__(self) -> str:
        base = f"[{self.system}, {self.stream}, {self.partition}"
        return base + (f", {self.key_bucket}]" if self.key_bucket is not None else "]")


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
