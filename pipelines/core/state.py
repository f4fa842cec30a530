"""Keyed state, the pure rules: a state's declaration, what a value may hold, how a schema may change, and the
bookkeeping every applied record leaves on its key's row.

A job declares named states (``state:`` in its YAML); each is a table of one row per key, the key being the
record's raw key bytes, so the key bucket of a row is a function of its key, never of where it was written, and a
rescale to any factor finds every row in the bucket its key hashes to. Next to the user's value columns each row
carries how many of the key's records were applied to it and the positions of the first and last of them: the
state check proves exactly-once from those alone, without knowing the user's fold. Where the rows live and how a
batch's changes commit with its sink rows: docs/design.md, "Keyed state".
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.core.adjunct import Fraction
from pipelines.core.durations import parse_duration
from pipelines.errors import ConfigError, PipelinesError

DEFAULT_MAX_VALUE_BYTES = 1 << 20
"""A state value (one key's row, its columns' sizes summed) is at most this many bytes unless the state says less or
more: a row is read whole into a Python worker for every batch that meets its key."""
MAX_VALUE_BYTES = 16 << 20
"""The largest ``max_value_bytes`` a state may declare: a parquet page and an Arrow buffer hold it with room."""
RESERVED_PREFIX = "_"
"""Value columns may not start with it: the platform's bookkeeping columns do."""

KEY, KEY_HASH = "key", "key_hash"
RECORDS = "_records"
FIRST = ("_first_stream", "_first_partition", "_first_offset")
LAST = ("_last_stream", "_last_partition", "_last_offset")
UPDATED_AT = "_updated_at"
HAS_VALUE = "_has_value"
SEGMENT = "_segment"
BOOKKEEPING = (RECORDS, *FIRST, *LAST, UPDATED_AT, HAS_VALUE, SEGMENT)
"""The columns every state row carries after its value columns (``pipelines.state.layout`` gives their types)."""

TYPES = ("bigint", "int", "smallint", "tinyint", "double", "float", "boolean", "string", "binary", "timestamp", "date")
"""Spark's simple type names a value column may have (and ``decimal(p,s)``): the flat DDL of ``output_schema``."""
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_INT_BITS = {"bigint": 64, "int": 32, "smallint": 16, "tinyint": 8}


class StateError(PipelinesError):
    """A process function used its state in a way the job does not allow (an undeclared state, a record without a
    key); raised inside the function, so the record goes to the dead-letter table with this message."""


class StateValueError(StateError):
    """A value does not fit its state's schema or size limit; the record goes to the dead-letter table and the
    key's state stays as it was."""


@dataclass(frozen=True)
class StateColumn:
    name: str
    type: str
    """Spark's simple type name: ``bigint``, ``string``, ``decimal(12,2)``..."""


@dataclass(frozen=True)
class StateSpec:
    """One declared state: its name, value columns (as DDL and parsed), time-to-live and value size limit."""

    name: str
    schema: str
    columns: tuple[StateColumn, ...]
    ttl_s: float | None = None
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES

    def to_dict(self) -> dict[str, Any]:
        """The form a job model saves (``JobConfig.to_dict``), read back by ``from_saved``."""
        return {
            "name": self.name,
            "schema": self.schema,
            "columns": [[c.name, c.type] for c in self.columns],
            "ttl_s": self.ttl_s,
            "max_value_bytes": self.max_value_bytes,
        }

    @classmethod
    def from_saved(cls, raw: Mapping[str, Any]) -> StateSpec:
        return cls(
            name=str(raw["name"]),
            schema=str(raw["schema"]),
            columns=tuple(StateColumn(str(n), str(t)) for n, t in raw["columns"]),
            ttl_s=None if raw.get("ttl_s") is None else float(raw["ttl_s"]),
            max_value_bytes=int(raw.get("max_value_bytes") or DEFAULT_MAX_VALUE_BYTES),
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def make_spec(
    name: str, schema: str, columns: Sequence[tuple[str, str]], ttl: object = None, max_value_bytes: object = None
) -> StateSpec:
    """A checked ``StateSpec`` from a declaration's parts (``columns``: the DDL parsed to (name, simple type))."""
    cols = tuple(StateColumn(n, t.lower().replace(" ", "")) for n, t in columns)
    for c in cols:
        if c.name.startswith(RESERVED_PREFIX):
            raise ConfigError(
                f"state {name!r}: column {c.name!r} starts with '{RESERVED_PREFIX}', which the platform's "
                f"bookkeeping columns use ({', '.join(BOOKKEEPING)}); rename it"
            )
        if c.name.lower() in (KEY, KEY_HASH):
            raise ConfigError(f"state {name!r}: column {c.name!r} is the row's own key column; rename it")
        if c.type not in TYPES and not _DECIMAL.match(c.type):
            raise ConfigError(f"state {name!r}: column {c.name!r} has type {c.type}, which a state cannot hold")
    ttl_s = None if ttl is None else parse_duration(ttl, f"state {name!r} ttl").total_seconds()
    limit = DEFAULT_MAX_VALUE_BYTES if max_value_bytes is None else max_value_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_VALUE_BYTES:
        raise ConfigError(f"state {name!r}: max_value_bytes must be a whole number from 1 to {MAX_VALUE_BYTES}")
    return StateSpec(name, schema, cols, ttl_s, limit)


def check_evolution(job: str, old: Sequence[StateSpec], new: Sequence[StateSpec]) -> None:
    """Refuse a new model's states unless each state kept every column with its type; adding columns is allowed.

    Rows written before the change keep their values and read the added columns as null (every column of a
    flat DDL is nullable); a dropped, renamed or retyped column would leave rows the new function cannot read
    as it expects, and the rows in the home cannot be rewritten safely while the job lives. A state may be
    added; a state dropped from the YAML is refused too, since its rows would stay in the home unread.
    """
    now = {s.name: s for s in new}
    for before in old:
        after = now.get(before.name)
        if after is None:
            raise ConfigError(
                f"job {job!r}: the new configuration drops state {before.name!r}; a state's rows stay with its "
                "job, so keep its declaration (a function may leave it unused)"
            )
        types = {c.name: c.type for c in after.columns}
        for c in before.columns:
            if c.name not in types:
                raise ConfigError(
                    f"job {job!r}: state {before.name!r} drops or renames column {c.name!r}; a state's schema may "
                    "only add columns (its rows in the home keep the old ones)"
                )
            if types[c.name] != c.type:
                raise ConfigError(
                    f"job {job!r}: state {before.name!r} changes column {c.name!r} from {c.type} to "
                    f"{types[c.name]}; a state's schema may only add columns"
                )


# ------------------------------------------------------------------ values


Checker = Callable[[Any], Any]


def value_checker(spec: StateSpec) -> Callable[[Any], dict[str, Any]]:
    """A function that checks one value for ``spec`` and returns it as a row of every column (missing: None).

    A value is a mapping of column names; an unknown name, a value of the wrong type and a row over the
    state's ``max_value_bytes`` raise ``StateValueError`` naming the column. Each check is a few
    ``isinstance`` calls, since a per-record job puts once per record.
    """
    checks = {c.name: column_checker(f"state {spec.name!r}", c) for c in spec.columns}
    names = spec.names
    limit = spec.max_value_bytes

    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise StateValueError(
                f"state {spec.name!r}: a value must be a dict of its columns ({', '.join(names)}), "
                f"got {type(value).__name__}"
            )
        unknown = [k for k in value if k not in checks]
        if unknown:
            raise StateValueError(f"state {spec.name!r} has no column {unknown[0]!r}; its columns: {', '.join(names)}")
        row = {n: checks[n](value.get(n)) for n in names}
        size = value_size(row)
        if size > limit:
            raise StateValueError(
                f"state {spec.name!r}: the value is {size:,} bytes, over the state's limit of {limit:,} "
                "(max_value_bytes)"
            )
        return row

    return check


def value_size(row: Mapping[str, Any]) -> int:
    """A row's size as a state counts it: the bytes of its strings and binaries, 8 for anything else."""
    total = 0
    for v in row.values():
        if isinstance(v, str):
            total += len(v.encode("utf-8")) if not v.isascii() else len(v)
        elif isinstance(v, bytes | bytearray | memoryview):
            total += len(v)
        else:
            total += 8
    return total


def column_checker(state: str, column: StateColumn) -> Checker:
    """The check of one column's values (``state``: the whole what, such as "state 'totals'"), raising
    ``StateValueError``; None passes (every column is nullable)."""

    def wrong(v: Any, wanted: str) -> StateValueError:
        return StateValueError(
            f"{state}: column {column.name!r} ({column.type}) needs {wanted}, got {type(v).__name__} {v!r:.80}"
        )

    kind = column.type
    if kind in _INT_BITS:
        low, high = -(1 << (_INT_BITS[kind] - 1)), (1 << (_INT_BITS[kind] - 1)) - 1

        def integer(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int):
                raise wrong(v, "a whole number")
            if not low <= v <= high:
                raise wrong(v, f"a whole number from {low} to {high}")
            return v

        return integer
    if kind in ("double", "float"):

        def real(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise wrong(v, "a number")
            return float(v)

        return real
    if kind == "boolean":
        return _exact(bool, "true or false", wrong)
    if kind == "string":
        return _exact(str, "a string", wrong)
    if kind == "binary":

        def binary(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, bytes | bytearray | memoryview):
                raise wrong(v, "bytes")
            return bytes(v)

        return binary
    if kind == "timestamp":

        def timestamp(v: Any) -> Any:
            if v is None:
                return None
            if not isinstance(v, dt.datetime):
                raise wrong(v, "a datetime")
            return v if v.tzinfo is not None else v.replace(tzinfo=dt.UTC)

        return timestamp
    if kind == "date":

        def date(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, dt.datetime) or not isinstance(v, dt.date):
                raise wrong(v, "a date")
            return v

        return date
    found = _DECIMAL.match(kind)
    if found is None:  # make_spec refused it already
        raise ConfigError(f"{state}: column {column.name!r} has type {kind}, which it cannot hold")
    precision, scale = int(found.group(1)), int(found.group(2))
    quantum = decimal.Decimal(1).scaleb(-scale)

    def fixed(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | decimal.Decimal):
            raise wrong(v, "a Decimal or a whole number")
        try:
            q = decimal.Decimal(v).quantize(quantum, context=decimal.Context(prec=precision))
        except decimal.InvalidOperation:
            raise wrong(v, f"a number with at most {precision} digits, {scale} of them after the point") from None
        if q != decimal.Decimal(v):
            raise wrong(v, f"at most {scale} digits after the point")
        return q

    return fixed


def _exact(kind: type, wanted: str, wrong: Callable[[Any, str], StateValueError]) -> Checker:
    def check(v: Any) -> Any:
        if v is None or isinstance(v, kind):
            return v
        raise wrong(v, wanted)

    return check


# ------------------------------------------------------------------ bookkeeping


def overlaps(fraction: Fraction, factor: int, bucket: int) -> bool:
    """Whether rows written by key bucket ``bucket`` of ``factor`` may hold keys of ``fraction``.

    A key with hash h is in bucket h mod X at one factor and h mod X' at another; both are congruent to h modulo
    gcd(X, X'), so the two buckets can share a key exactly when they are congruent modulo it (the Chinese
    remainder theorem: every such pair has keys in common). A task reads only the change files of buckets that
    overlap its own, whatever factor wrote them.
    """
    g = math.gcd(factor, fraction.factor)
    return bucket % g == fraction.bucket % g


def switch_reads(old: int, new: int, state_bytes: int) -> tuple[str, int]:
    """Where the tasks of a switch from factor ``old`` to ``new`` read their state, and about how many bytes each.

    After a split (``new`` a multiple of ``old``) a new bucket's keys are all in its parent's fraction, cached on
    the hosts that ran it: a task there reads only the changes after it. Any other change gives each new task a
    fraction no old one held; it is built once from the home: about its share of the state.
    """
    if new % old == 0:
        return "its parent's cached fraction (only the newest changes from the home)", 0
    return "the home (current, then the changes after it), once", state_bytes // max(new, 1)


def expired(updated_at_us: int | None, ttl_s: float | None, now_us: int) -> bool:
    """A row last changed at ``updated_at_us`` has outlived its state's time-to-live by ``now_us``.

    Both times are the planned times of micro-batches (the store's clock, named in each batch's offsets), so a
    replayed batch judges exactly as its first run did, whichever host runs it.
    """
    return ttl_s is not None and updated_at_us is not None and updated_at_us + int(ttl_s * 1_000_000) <= now_us


def already_applied(
    row: Mapping[str, Any], stream: str, partition: int, offset: str, order: Callable[[str], Any]
) -> bool:
    """The record at (stream, partition, offset) is at or before the last one applied to this row in the same
    partition: re-read (a merge's minimum, an at-least-once replay) and already in the state."""
    return (
        row.get(LAST[0]) == stream
        and row.get(LAST[1]) == partition
        and row.get(LAST[2]) is not None
        and not order(row[LAST[2]]) < order(offset)
    )


def applied(
    row: dict[str, Any] | None,
    stream: str,
    partition: int,
    offset: str,
    now_us: int,
    segment: int,
) -> dict[str, Any]:
    """The bookkeeping of ``row`` after one more record of its key was applied (``row`` None: the key's first)."""
    out: dict[str, Any] = {} if row is None else row
    if row is None or not out.get(RECORDS):
        out[FIRST[0]], out[FIRST[1]], out[FIRST[2]] = stream, partition, offset
        out[RECORDS] = 0
        out.setdefault(HAS_VALUE, False)
    out[RECORDS] += 1
    out[LAST[0]], out[LAST[1]], out[LAST[2]] = stream, partition, offset
    out[UPDATED_AT] = now_us
    out[SEGMENT] = segment
    return out
