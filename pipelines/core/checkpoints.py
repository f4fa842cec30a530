"""Checkpoints per (SSP, key bucket) and their migration from one job model to the next.

A checkpoint is the *next* position to read for one key bucket of one partition
under one elasticity factor. Positions (``pipelines.core.positions.Position``)
are opaque strings ordered only by the input system's ``position_key``, which
every function here takes. The stored and wire formats say "offset", as
Samza's checkpoints do. Migration is ``new(p, b', X') = min{ old(p, b, X) :
b ≡ b' (mod gcd(X, X')) }``: inheritance on a split, the minimum on a merge, and
at-least-once for any other change. Why it is safe for every pair of factors:
docs/design.md, "Checkpoints and their migration".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from math import gcd
from typing import Any, cast

from pipelines.core.bulk import collector_paused
from pipelines.core.hashing import validate_factor
from pipelines.core.limits import check_partition_number, check_task_count, shown
from pipelines.core.positions import Position
from pipelines.core.ssp import SystemStreamPartition, validate_name
from pipelines.errors import ConfigError, ModelError

PositionKey = Callable[[Position], Any]
"""An input system's order of the positions of one partition (its ``position_key``)."""


def partition_floor(
    offsets: Iterable[tuple[SystemStreamPartition, Position]], position_key: PositionKey
) -> dict[SystemStreamPartition, Position]:
    """Per whole partition, the smallest position of its key buckets: where the partition as a whole stands.

    ``position_key`` is the input system's order of positions; there is no
    default, because no order is right for every system.
    """
    floor: dict[SystemStreamPartition, tuple[Any, Position]] = {}
    for ssp, offset in offsets:
        whole, value = ssp.whole(), position_key(offset)
        if whole not in floor or value < floor[whole][0]:
            floor[whole] = (value, offset)
    return {whole: offset for whole, (_, offset) in floor.items()}


@dataclass(frozen=True)
class CheckpointMap:
    """A job model's complete checkpoints: every key bucket of every partition it reads."""

    factor: int
    offsets: Mapping[SystemStreamPartition, Position]

    def partitions(self) -> set[SystemStreamPartition]:
        return {ssp.whole() for ssp in self.offsets}

    def offset(self, ssp: SystemStreamPartition, bucket: int) -> Position:
        key = ssp.whole() if self.factor == 1 else ssp.whole().bucket(bucket)
        try:
            return self.offsets[key]
        except KeyError:
            # a factor-1 map written with explicit bucket 0 is accepted too
            if self.factor == 1 and ssp.whole().bucket(0) in self.offsets:
                return self.offsets[ssp.whole().bucket(0)]
            raise ModelError(f"checkpoint map (factor {self.factor}) has no offset for {key}") from None

    def check_complete(self) -> None:
        """A partial map would let migration skip buckets; refuse it with the missing bucket named."""
        self.by_partition()

    def by_partition(self) -> dict[SystemStreamPartition, list[Position]]:
        """Offsets of each whole partition, indexed by key bucket; raises if any bucket is missing."""
        table: dict[SystemStreamPartition, list[Position | None]] = {}
        for ssp, offset in self.offsets.items():
            bucket = ssp.key_bucket or 0
            if bucket >= self.factor:
                raise ModelError(f"checkpoint for {ssp} has key bucket >= factor {self.factor}")
            table.setdefault(ssp.whole(), [None] * self.factor)[bucket] = offset
        for whole, offsets in table.items():
            if None in offsets:
                self.offset(whole, offsets.index(None))  # raises, naming the missing bucket
        return cast(dict[SystemStreamPartition, list[Position]], table)  # no None is left

    def to_json(self) -> dict[str, Any]:
        return {
            "factor": self.factor,
            "checkpoints": [
                {"ssp": ssp.to_json(), "offset": off}
                for ssp, off in sorted(self.offsets.items(), key=lambda kv: _sort_key(kv[0]))
            ],
        }

    @classmethod
    def from_json(cls, value: Any) -> CheckpointMap:
        """The map a file holds (``model migrate --from``), in the form ``to_json`` writes.

        Only what a job's map can be is taken: names the platform would
        refuse for a stream, keys it would ignore, or no checkpoints at all
        mean the file is not the map of a job, and migrating it anyway would
        print a map no job could start from. Offsets are not limited: they
        belong to their system (Kinesis sequence numbers run to 128 digits).
        """
        if not isinstance(value, dict) or "checkpoints" not in value:
            raise ModelError(
                'checkpoint map must be an object {"factor": X, "checkpoints": [{"ssp": [...], "offset": "..."}]}'
            )
        _refuse_unknown_keys(value, "checkpoint map", "its", _KEYS)
        try:
            factor = validate_factor(value.get("factor", 1))
        except Exception as e:
            raise ModelError(f"checkpoint map: {e}") from None
        rows = value["checkpoints"]
        if not isinstance(rows, list):
            raise ModelError(
                f'checkpoint map: \'checkpoints\' must be a list of {{"ssp": [...], "offset": "..."}}, '
                f"got {shown(rows)}"
            )
        if not rows:  # every job reads at least one partition, so its map holds at least one checkpoint
            raise ModelError(
                "checkpoint map has no checkpoints: nothing to migrate, so probably not the file meant; "
                "'pipelines job checkpoints JOB --json' writes a job's map"
            )
        offsets: dict[SystemStreamPartition, Position] = {}
        named: set[tuple[str, str]] = set()  # each stream's names are checked once, not at each of its buckets
        for i, row in enumerate(rows):
            if isinstance(row, dict):
                _refuse_unknown_keys(row, f"checkpoint #{i}", "a checkpoint's", _ROW_KEYS)
            if not isinstance(row, dict) or "ssp" not in row or "offset" not in row:
                raise ModelError(f"checkpoint #{i} must have 'ssp' and 'offset', got {shown(row)}")
            ssp = SystemStreamPartition.from_json(row["ssp"])
            try:
                if (ssp.system, ssp.stream) not in named:  # a name no stream can have (a/b) is a wrong file
                    validate_name("system", ssp.system)
                    validate_name("stream", ssp.stream)
                    named.add((ssp.system, ssp.stream))
                check_partition_number(ssp.partition, "partition")
            except ConfigError as e:
                raise ModelError(f"checkpoint #{i}: {e}") from None
            offset = row["offset"]
            if isinstance(offset, bool) or not isinstance(offset, (int, str)):
                raise ModelError(f"checkpoint #{i} offset must be a string or integer, got {shown(offset)}")
            if ssp in offsets:
                raise ModelError(f"checkpoint map has two offsets for {ssp}")
            offsets[ssp] = str(offset)
        result = cls(factor, offsets)
        result.check_complete()
        return result

    @classmethod
    def loads(cls, text: str) -> CheckpointMap:
        """The map a JSON text holds (``from_json``), each key of each of its objects written once."""
        try:
            document = json.loads(text, object_pairs_hook=_once_each)
        except ValueError as e:
            raise ModelError(f"checkpoint map is not valid JSON: {e}") from None
        except RecursionError:  # 100,000 '[': no checkpoint map nests deeper than four levels
            raise ModelError("checkpoint map nests too deeply: a checkpoint map's JSON is four levels deep") from None
        return cls.from_json(document)


_KEYS = ("factor", "checkpoints")
"""A checkpoint map's keys, as ``CheckpointMap.to_json`` writes them."""

_ROW_KEYS = ("ssp", "offset")
"""A checkpoint's keys (one row of ``checkpoints``), as ``CheckpointMap.to_json`` writes them."""


def _refuse_unknown_keys(document: dict[Any, Any], where: str, whose: str, keys: tuple[str, ...]) -> None:
    """Any other key would be ignored: a misspelt ``factr: 4`` would read the map at factor 1, a row's ``ofset``
    would be taken for no offset at all, and a file that merely holds a ``checkpoints`` list (some other tool's)
    would pass for a map."""
    unknown = sorted(shown(key) for key in document if key not in keys)
    if unknown:
        named = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ModelError(
            f"{where} has unknown key{'s' if len(unknown) > 1 else ''} {named}; {whose} keys are "
            + " and ".join(f"'{key}'" for key in keys)
        )


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each written once (``json.loads``'s ``object_pairs_hook``, at every depth).

    ``json`` keeps the last of two equal keys without a word, so ``{"factor": 4, ..., "factor": 1}`` was read at
    factor 1 and a row's second ``offset`` won over its first; another reader may keep the first. Which one the
    file means is not ours to guess.
    """
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise ModelError(
                f"checkpoint map has the key {shown(key)} twice in one object: which one counts would be the "
                "reader's choice; write each key once"
            )
        document[key] = value
    return document


def migrate_checkpoints(
    old: CheckpointMap,
    new_factor: int,
    new_partitions: Iterable[SystemStreamPartition],
    earliest: Mapping[SystemStreamPartition, Position],
    position_key: PositionKey,
) -> CheckpointMap:
    """The new model's complete checkpoint map, computed from the old model's complete map.

    ``new_partitions`` are the whole partitions the new model reads;
    partitions the old map does not cover are new (partition expansion) and
    start at their ``earliest`` offset.
    """
    x_new = validate_factor(new_factor)
    wholes = {s.whole() for s in new_partitions}
    for ssp in wholes:
        check_partition_number(ssp.partition, f"{ssp}: partition")
    check_task_count(len(wholes), x_new, "the migrated checkpoint map")  # before building any of its checkpoints
    with collector_paused():  # 320,000 new checkpoints at 10,000 partitions x 32, in a rescale's downtime
        return _migrated(old, x_new, wholes, earliest, position_key)


def _migrated(
    old: CheckpointMap,
    x_new: int,
    new_partitions: Iterable[SystemStreamPartition],
    earliest: Mapping[SystemStreamPartition, Position],
    position_key: PositionKey,
) -> CheckpointMap:
    old_offsets = old.by_partition()
    g = gcd(old.factor, x_new)
    result: dict[SystemStreamPartition, Position] = {}
    for ssp in sorted({s.whole() for s in new_partitions}, key=_sort_key):
        offsets = old_offsets.get(ssp)
        if offsets is None:
            try:
                start = earliest[ssp]
            except KeyError:
                raise ModelError(f"{ssp} is new and no earliest offset was given for it") from None
            starts = [start] * g
        else:  # bucket b' starts at the minimum over its residue class modulo g
            starts = [min(offsets[r::g], key=position_key) for r in range(g)]
        if x_new == 1:
            result[ssp] = starts[0]
        else:
            for b_new in range(x_new):
                result[ssp.bucket(b_new)] = starts[b_new % g]
    return CheckpointMap(x_new, result)


def _sort_key(ssp: SystemStreamPartition) -> tuple[str, str, int, int]:
    return (ssp.system, ssp.stream, ssp.partition, -1 if ssp.key_bucket is None else ssp.key_bucket)
