"""A virtual task's states in one micro-batch: what ``ctx.state`` reads and writes, and the change files it leaves.

The task reads its keys' rows once per batch, in bulk, from its host's cache at exactly the segment the batch
was planned on (``StateVersions``, named in the batch's end offset, so a replay reads the same). Each call of
the process function is a transaction: its writes are kept apart and become the task's only when the call
returns (and its output fits the job's schema); a call that raises leaves every key as it was, and its record
goes to the dead-letter table. Every record a call applied adds to its key's bookkeeping in every state of the
job (``pipelines.core.state.applied``). When the task ends, the rows it changed are one parquet file per state,
which the sink's commit adds to the state's ``changes`` table as the batch's segment (docs/design.md,
"Keyed state").
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.core import state as rules
from pipelines.core.adjunct import Fraction
from pipelines.state import layout
from pipelines.state.cache import ReadStats, StateCache, cache_for, hashes_of
from pipelines.state.durable import ChangeFile, StateTables
from pipelines.storage.home import Home
from pipelines.storage.objects import store_for

OFFSET_KEY = "state"
"""Where the state segments sit in the elastic source's offset JSON."""

_DELETED = object()


@dataclass(frozen=True)
class StateVersions:
    """The segment of each state a micro-batch was planned on, and the batch's planned time (the store's clock).

    Named in the batch's end offset, which Spark logs before the batch runs, so a replay reads the very same
    state and judges time-to-live at the very same moment.
    """

    segments: Mapping[str, int]
    time_us: int

    def to_json(self) -> dict[str, Any]:
        return {"segments": dict(sorted(self.segments.items())), "time_us": self.time_us}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StateVersions:
        return cls({str(k): int(v) for k, v in raw["segments"].items()}, int(raw["time_us"]))


class StateHandle:
    """One state as a process function sees it: the rows of the keys its task was given.

    Per record: ``get(key)`` (a dict of the value columns, or None), ``put(key, value)``, ``delete(key)``.
    In bulk (the Arrow form): ``read(keys)`` (a table of the value columns and ``_exists``, one row per key),
    ``write(keys, values)``, ``remove(keys)``. Keys are the records' raw key bytes.
    """

    def __init__(self, task: TaskStates, spec: rules.StateSpec) -> None:
        self._task, self.spec = task, spec
        self._check = rules.value_checker(spec)
        self._schema = pa.schema(layout.value_fields(spec))

    @property
    def name(self) -> str:
        return self.spec.name

    def get(self, key: bytes | None) -> dict[str, Any] | None:
        return self._task.value(self.spec.name, self._task.own_key(key, self.spec.name))

    def put(self, key: bytes | None, value: Mapping[str, Any]) -> None:
        self._task.stage(self.spec.name, self._task.own_key(key, self.spec.name), self._check(value))

    def delete(self, key: bytes | None) -> None:
        self._task.stage(self.spec.name, self._task.own_key(key, self.spec.name), _DELETED)

    def read(self, keys: Iterable[bytes | None] | pa.Array | pa.ChunkedArray) -> pa.Table:
        """One row per key, in order: the value columns (null where the key has no value) and ``_exists``."""
        values, exists = [], []
        for key in _key_list(keys):
            value = self.get(key)
            values.append(value or {})
            exists.append(value is not None)
        table = pa.Table.from_pylist(values, schema=self._schema)
        return table.append_column("_exists", pa.array(exists, pa.bool_()))

    def write(self, keys: Iterable[bytes | None] | pa.Array | pa.ChunkedArray, values: Any) -> None:
        """``values``: a table of value columns (any subset) or a list of dicts, one per key; the last write of
        a key wins."""
        key_list = _key_list(keys)
        rows = values.to_pylist() if isinstance(values, pa.Table | pa.RecordBatch) else list(values)
        if len(rows) != len(key_list):
            raise rules.StateValueError(
                f"state {self.spec.name!r}: write got {len(key_list)} keys and {len(rows)} values"
            )
        for key, value in zip(key_list, rows, strict=True):
            self.put(key, {k: v for k, v in value.items() if not (v is None and k not in self.spec.names)})

    def remove(self, keys: Iterable[bytes | None] | pa.Array | pa.ChunkedArray) -> None:
        for key in _key_list(keys):
            self.delete(key)


class States:
    """``ctx.state``: the job's states by name (``ctx.state["totals"]``), or its only one directly
    (``ctx.state.get(key)``)."""

    def __init__(self, handles: Mapping[str, StateHandle], job: str) -> None:
        self._handles, self._job = dict(handles), job

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._handles)

    def __getitem__(self, name: str) -> StateHandle:
        handle = self._handles.get(name)
        if handle is None:
            declared = ", ".join(repr(n) for n in self._handles) or "none"
            raise rules.StateError(
                f"job {self._job!r} has no state {name!r}; it declares {declared} (state: in its YAML)"
            )
        return handle

    def __contains__(self, name: object) -> bool:
        return name in self._handles

    def _only(self) -> StateHandle:
        if len(self._handles) != 1:
            raise rules.StateError(
                f"job {self._job!r} declares {len(self._handles)} states ({', '.join(self._handles)}): name one, "
                "as ctx.state['NAME'].get(key)"
            )
        return next(iter(self._handles.values()))

    def get(self, key: bytes | None) -> dict[str, Any] | None:
        return self._only().get(key)

    def put(self, key: bytes | None, value: Mapping[str, Any]) -> None:
        self._only().put(key, value)

    def delete(self, key: bytes | None) -> None:
        self._only().delete(key)

    def read(self, keys: Any) -> pa.Table:
        return self._only().read(keys)

    def write(self, keys: Any, values: Any) -> None:
        self._only().write(keys, values)

    def remove(self, keys: Any) -> None:
        self._only().remove(keys)


class NoStates(States):
    """``ctx.state`` of a job that declares none: every use says so."""

    def __init__(self, job: str) -> None:
        super().__init__({}, job)

    def __getitem__(self, name: str) -> StateHandle:
        raise rules.StateError(f"job {self._job!r} declares no state; add a state: section to its YAML to keep one")

    def _only(self) -> StateHandle:
        raise rules.StateError(f"job {self._job!r} declares no state; add a state: section to its YAML to keep one")


@dataclass
class TaskStats:
    """What a task's states did in one batch, for the metrics table (per state)."""

    keys: int = 0
    rows_written: int = 0
    skipped: int = 0
    read: ReadStats = field(default_factory=ReadStats)


class TaskStates:
    """The states of one virtual task in one micro-batch (module docstring)."""

    def __init__(
        self,
        home: Home,
        job: str,
        specs: Sequence[rules.StateSpec],
        versions: StateVersions,
        *,
        factor: int,
        bucket: int,
        model_version: int,
        batch_id: int,
        cache: StateCache | None = None,
    ) -> None:
        self.home, self.job, self.versions = home, job, versions
        self.specs = {s.name: s for s in specs}
        self.factor, self.bucket = factor, bucket
        self.fraction = Fraction(bucket, factor)
        self.model_version, self.batch_id = model_version, batch_id
        self.cache = cache or cache_for()
        self.tables = {s.name: StateTables(home, job, s) for s in specs}
        self.rows: dict[str, dict[bytes, dict[str, Any] | None]] = {s.name: {} for s in specs}
        self.dirty: dict[str, set[bytes]] = {s.name: set() for s in specs}
        self.txn: dict[str, dict[bytes, Any]] = {s.name: {} for s in specs}
        self.stats = {s.name: TaskStats() for s in specs}
        self.api = States({s.name: StateHandle(self, s) for s in specs}, job)
        self.names = {s.name: layout.row_names(s) for s in specs}
        self._hash: dict[bytes, int] = {}

    # ------------------------------------------------------------------ loading

    def load(self, keys: Iterable[bytes | None]) -> None:
        """Read the rows of those keys (the task's next records') that are not loaded yet, in one bulk read."""
        fresh = list(dict.fromkeys(k for k in keys if k is not None and k not in self.rows[next(iter(self.rows))]))
        if not fresh:
            return
        hashes = hashes_of(fresh)
        self._hash.update(zip(fresh, hashes.tolist(), strict=True))
        for name, tables in self.tables.items():
            stats = self.stats[name]
            part = self.cache.part(tables, self.fraction, self.versions.segments.get(name, 0), stats.read)
            found = part.lookup(fresh, hashes)
            stats.read.keys_looked_up += len(fresh)
            stats.read.rows_found += len(found)
            rows = self.rows[name]
            for key in fresh:
                row = found.get(key)
                if row is not None and rules.expired(row[rules.UPDATED_AT], self.specs[name].ttl_s, self.now):
                    row = None  # outlived its time-to-live: the key starts afresh
                rows[key] = row
            stats.keys = len(rows)

    @property
    def now(self) -> int:
        return self.versions.time_us

    def own_key(self, key: bytes | None, state: str) -> bytes:
        """The key, if this task was given a record of it; a state is read and written only by its key's task."""
        if key is None:
            raise rules.StateError(f"state {state!r}: a record without a key has no keyed state")
        if not isinstance(key, bytes):  # a bytearray or a str: say what a key is
            raise rules.StateError(f"state {state!r}: a key is the record's key bytes, got {type(key).__name__}")
        if key not in self.rows[state]:
            raise rules.StateError(
                f"state {state!r}: key {key[:60]!r} is not among this task's records; a task reads and writes only "
                "the state of the keys it was given (another task owns the others)"
            )
        return key

    # ------------------------------------------------------------------ one call of the function

    def value(self, state: str, key: bytes) -> dict[str, Any] | None:
        staged = self.txn[state].get(key)
        if staged is _DELETED:
            return None
        if staged is not None:
            return dict(staged)
        row = self.rows[state].get(key)
        if row is None or not row.get(rules.HAS_VALUE):
            return None
        return {n: row.get(n) for n in self.specs[state].names}

    def stage(self, state: str, key: bytes, value: Any) -> None:
        self.txn[state][key] = value

    def begin(self) -> None:
        for staged in self.txn.values():
            staged.clear()

    def rollback(self) -> None:
        self.begin()

    def applied_before(
        self, key: bytes | None, stream: str, partition: int, offset: str, order: Callable[[str], Any]
    ) -> bool:
        """The record is at or before the last one applied to its key (re-read by an at-least-once path)."""
        if key is None:
            return False
        row = self.rows[next(iter(self.rows))].get(key)
        return row is not None and rules.already_applied(row, stream, partition, offset, order)

    def commit(self, records: Iterable[tuple[bytes | None, str, int, str]]) -> None:
        """Make the call's writes the task's, and count ``records`` (key, stream, partition, offset) as applied."""
        segment_of = {name: self.versions.segments.get(name, 0) + 1 for name in self.specs}
        for key, stream, partition, offset in records:
            if key is None:
                continue
            for name, rows in self.rows.items():
                row = rows.get(key)
                if row is None:
                    row = self._new_row(name, key)
                rows[key] = rules.applied(row, stream, partition, offset, self.now, segment_of[name])
                self.dirty[name].add(key)
        for name, staged in self.txn.items():
            rows = self.rows[name]
            columns = self.specs[name].names
            for key, value in staged.items():
                row = rows.get(key)
                if row is None:
                    row = rows[key] = self._new_row(name, key)
                if value is _DELETED:
                    row.update(dict.fromkeys(columns))
                    row[rules.HAS_VALUE] = False
                else:
                    row.update(value)
                    row[rules.HAS_VALUE] = True
                row[rules.UPDATED_AT] = self.now
                row[rules.SEGMENT] = segment_of[name]
                self.dirty[name].add(key)
            staged.clear()

    def _new_row(self, state: str, key: bytes) -> dict[str, Any]:
        h = self._hash.get(key)
        if h is None:
            h = int(hashes_of([key])[0])
        row: dict[str, Any] = dict.fromkeys(self.names[state])
        row.update({rules.KEY: key, rules.KEY_HASH: h, rules.RECORDS: 0, rules.HAS_VALUE: False})
        return row

    # ------------------------------------------------------------------ the end of the task

    def finish(self) -> dict[str, list[ChangeFile]]:
        """Write the rows this task changed, one parquet file per state, into the state's ``changes`` folder."""
        out: dict[str, list[ChangeFile]] = {}
        for name, keys in self.dirty.items():
            if not keys:
                continue
            spec = self.specs[name]
            rows = self.rows[name]
            changed = sorted((r for k in keys if (r := rows[k]) is not None), key=lambda r: int(r[rules.KEY_HASH]))
            table = _cache_table(spec, changed)
            n = table.num_rows
            table = table.append_column("model_version", pa.array(np.full(n, self.model_version, np.int64)))
            table = table.append_column("batch_id", pa.array(np.full(n, self.batch_id, np.int64)))
            segment = self.versions.segments.get(name, 0) + 1
            rel = f"factor={self.factor}/key_bucket={self.bucket}/part-{uuid.uuid4().hex}.parquet"
            root = self.tables[name].changes_path
            store = store_for(root)
            store.makedirs(root / rel.rsplit("/", 1)[0])
            with store.filesystem().open_output_stream(store.arrow_path(root / rel)) as stream:
                pq.write_table(table, stream)
                size = stream.tell()
            hashes = table.column(rules.KEY_HASH)
            out[name] = [
                ChangeFile(rel, int(size), n, self.factor, self.bucket, segment, hashes[0].as_py(), hashes[-1].as_py())
            ]
            self.stats[name].rows_written += n
            self.cache.remember_written(self.tables[name], rel, {r[rules.KEY]: dict(r) for r in changed})
        return out


def _cache_table(spec: rules.StateSpec, rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Rows (times as microseconds) as a ``current_schema`` table."""
    schema = layout.current_schema(spec)
    i = schema.get_field_index(rules.UPDATED_AT)
    raw = schema.set(i, pa.field(rules.UPDATED_AT, pa.int64()))
    table = pa.Table.from_pylist(list(rows), schema=raw)
    return table.set_column(i, schema.field(i), table.column(i).cast(layout.TIME))


def _key_list(keys: Iterable[bytes | None] | pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        listed: list[bytes | None] = keys.to_pylist()
        return listed
    return list(keys)
