"""A state's durable truth: its ``changes`` and ``current`` Delta tables in the home (``pipelines.state.layout``).

One writer commits changes (the job's sink commit, on the driver), one compacts (the driver's compaction
thread, or ``pipelines job compact``); readers anywhere. Every changes commit is a *segment*: the rows of the
keys one micro-batch changed, numbered ``previous + 1`` where ``previous`` is the segment the batch was
planned on, under two Delta application transactions, the batch's own (the sink's exactly-once key) and
``(state-writer, segment)``: a replay finds its batch committed, and a second driver that planned on the same
segment loses the race instead of interleaving. Why segments and compaction rather than MERGE, and how a
segment stays together with the sink's rows: docs/design.md, "Keyed state".
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.schema import Field as DeltaField
from deltalake.transaction import AddAction, RemoveAction

from pipelines.control.table import COMMIT_RETRIES, RETRY_BACKOFF, lost_commit_race
from pipelines.core import state as rules
from pipelines.core.adjunct import Fraction
from pipelines.core.hashing import in_fraction
from pipelines.core.state import overlaps
from pipelines.deltaio import create_table, open_if_table, read_delta, readable, refresh
from pipelines.state import layout
from pipelines.storage.home import Home

WRITER_APP = "state-writer"
COMPACTOR_APP = "state-compactor"
SEGMENT_KEY = "pipelines.state.segment"
BATCH_KEY = "pipelines.state.batch"
"""A ``current`` version's ``<model version>/<batch id>``: the batch of the newest segment it folds in."""
TIME_KEY = "pipelines.state.time_us"
COMMIT_ATTEMPTS = 20


class StateConflictError(rules.StateError):
    """Another process committed to a state this driver planned a batch on: only one driver may run a job."""


@dataclass(frozen=True)
class ChangeFile:
    """One virtual task's rows of one segment: a parquet file under ``factor=<X>/key_bucket=<b>/`` of ``changes``."""

    path: str
    size: int
    rows: int
    factor: int
    bucket: int
    segment: int
    min_hash: int
    max_hash: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ChangeFile:
        return cls(**raw)

    def action(self) -> AddAction:
        stats = {
            "numRecords": self.rows,
            "minValues": {rules.SEGMENT: self.segment, rules.KEY_HASH: self.min_hash},
            "maxValues": {rules.SEGMENT: self.segment, rules.KEY_HASH: self.max_hash},
            "nullCount": {rules.SEGMENT: 0, rules.KEY_HASH: 0},
        }
        return AddAction(
            path=self.path,
            size=self.size,
            partition_values={"factor": str(self.factor), "key_bucket": str(self.bucket)},
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=json.dumps(stats),
        )


class StateTables:
    """One state's two tables; handles are cached and refreshed before each use. Not for sharing between threads
    without ``lock``."""

    def __init__(self, home: Home, job: str, spec: rules.StateSpec) -> None:
        self.home, self.job, self.spec = home, job, spec
        self.changes_path = layout.changes_path(home, job, spec.name)
        self.current_path = layout.current_path(home, job, spec.name)
        self._tables: dict[str, DeltaTable] = {}
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ tables

    def ensure(self) -> None:
        """Both tables exist with every column of the spec (columns a newer spec added are added to them)."""
        for path, schema, partitions in (
            (self.current_path, layout.current_schema(self.spec), None),
            (self.changes_path, layout.changes_schema(self.spec), list(layout.CHANGES_PARTITIONS)),
        ):
            dt = open_if_table(path)
            if dt is None:
                create_table(path, schema, mode="ignore", partition_by=partitions)
                continue
            have = set(pa.schema(dt.schema().to_arrow()).names)
            missing = [f for f in schema if f.name not in have]
            if missing:
                with readable(path):
                    dt.alter.add_columns([DeltaField.from_arrow(f) for f in missing])
        self._tables.clear()

    def _table(self, name: str) -> DeltaTable:
        path = self.changes_path if name == "changes" else self.current_path
        dt = self._tables.get(name)
        if dt is None:
            dt = open_if_table(path)
            if dt is None:
                raise rules.StateError(
                    f"state {self.spec.name!r} of job {self.job!r} has no {name} table at {path}; "
                    "'pipelines job create' makes it"
                )
            self._tables[name] = dt
        else:
            refresh(dt)
        return dt

    def changes(self) -> DeltaTable:
        return self._table("changes")

    def current(self) -> DeltaTable:
        return self._table("current")

    # ------------------------------------------------------------------ segments

    def segment(self) -> int:
        """The last committed segment (0: none yet)."""
        return int(self.changes().transaction_version(WRITER_APP) or 0)

    def committed(self, app_id: str, batch_id: int) -> bool:
        """Whether the micro-batch ``(app_id, batch_id)`` committed its changes (or had none to commit and an
        earlier one of its query did: a query's batches commit in order)."""
        done = self.changes().transaction_version(app_id)
        return done is not None and done >= batch_id

    def commit(
        self, files: Sequence[ChangeFile], *, previous: int, app_id: str, batch_id: int, time_us: int
    ) -> int | None:
        """Commit one batch's change files as segment ``previous + 1``; None when the batch committed before.

        Refused (``StateConflictError``) when another segment landed since the batch was planned: its rows were
        computed from segment ``previous``, and committing them on top of another would lose that one's changes.
        A commit that failed Delta's conflict check because compaction retired files meanwhile is written again
        on the newer snapshot: its rows depend on nothing retired.
        """
        segment = previous + 1

        def commit_once() -> int | None:
            with self.lock:
                dt = self.changes()
                done = dt.transaction_version(app_id)
                if done is not None and done >= batch_id:
                    return None
                last = int(dt.transaction_version(WRITER_APP) or 0)
                if last != previous:
                    raise StateConflictError(
                        f"state {self.spec.name!r} of job {self.job!r} is at segment {last}, but batch {batch_id} "
                        f"was planned on segment {previous}: another driver wrote it; only one driver may run a job"
                    )
                dt.create_write_transaction(
                    [f.action() for f in files],
                    "append",
                    dt.schema(),
                    partition_by=list(layout.CHANGES_PARTITIONS),
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction(app_id, batch_id), Transaction(WRITER_APP, segment)],
                        custom_metadata={SEGMENT_KEY: str(segment), TIME_KEY: str(time_us)},
                        max_commit_retries=COMMIT_RETRIES,
                    ),
                )
                return segment

        return RETRY_BACKOFF.retry(commit_once, attempts=COMMIT_ATTEMPTS, retriable=lost_commit_race)

    def change_actions(self, after: int, upto: int, fraction: Fraction | None = None) -> list[dict[str, Any]]:
        """The add actions of segments ``(after, upto]`` whose rows may hold keys of ``fraction`` (None: all).

        Raises ``TailRetired`` when a segment of the range is no longer there (compaction folded it into
        ``current`` and retired it): every committed segment has at least one file, so a gap means retired.
        """
        if upto <= after:
            return []
        with readable(self.changes_path):
            actions = pa.table(self.changes().get_add_actions(flatten=True)).to_pylist()
        in_range = [a for a in actions if _in_range(a, after, upto)]
        present = {int(a[f"min.{rules.SEGMENT}"]) for a in in_range if a.get(f"min.{rules.SEGMENT}") is not None}
        if len(present) != upto - after:
            raise TailRetired(
                f"state {self.spec.name!r}: segments ({after}, {upto}] are not all in its changes table any more "
                f"({len(present)} are)"
            )
        return [a for a in in_range if _of_fraction(a, fraction)]

    def read_actions(
        self, actions: Sequence[dict[str, Any]], after: int, upto: int, fraction: Fraction | None = None
    ) -> pa.Table:
        """The rows of those change files in segments ``(after, upto]`` (of ``fraction``'s keys), as
        ``changes_schema``."""
        paths = {a["path"] for a in actions}
        if not paths:
            return layout.changes_schema(self.spec).empty_table()
        rows = read_delta(self.changes(), schema=layout.changes_schema(self.spec), keep=lambda a: a["path"] in paths)
        if rows.num_rows:
            rows = rows.filter(
                pc.and_(pc.greater(rows[rules.SEGMENT], after), pc.less_equal(rows[rules.SEGMENT], upto))
            )
            if fraction is not None and fraction.factor > 1:
                rows = rows.filter(fraction_mask(rows[rules.KEY_HASH], fraction))
        return rows

    def read_changes(self, after: int, upto: int, fraction: Fraction | None = None) -> pa.Table:
        """Rows of segments ``(after, upto]`` (of ``fraction``'s keys only); ``TailRetired`` as ``change_actions``."""
        return self.read_actions(self.change_actions(after, upto, fraction), after, upto, fraction)

    def oldest_segment(self, dt: DeltaTable | None = None) -> int | None:
        """The oldest segment the changes table still holds rows of (None: it holds none)."""
        dt = dt or self.changes()
        actions = pa.table(dt.get_add_actions(flatten=True))
        name = f"min.{rules.SEGMENT}"
        if actions.num_rows == 0 or name not in actions.column_names:
            return None
        low = pc.min(actions[name]).as_py()
        return None if low is None else int(low)

    # ------------------------------------------------------------------ current

    def current_as_of(self, dt: DeltaTable | None = None) -> int:
        """The segment the ``current`` table's latest version folds in (0: no compaction yet).

        The newest compaction's commit says it; later commits (columns added by a new version's schema) do not
        change the rows.
        """
        dt = dt or self.current()
        for entry in dt.history():
            if entry.get(SEGMENT_KEY) is not None:
                return int(entry[SEGMENT_KEY])
        return 0

    def current_for(self, segment: int) -> tuple[DeltaTable, int]:
        """The newest version of ``current`` that folds in at most ``segment``, and the segment it folds in."""
        dt = self.current()
        for i, entry in enumerate(dt.history()):
            found = entry.get(SEGMENT_KEY)
            if found is None:
                continue
            if int(found) <= segment:
                if i == 0 or self.current_as_of(dt) == int(found):
                    return dt, int(found)
                old = DeltaTable(dt.table_uri, version=int(entry["version"]), storage_options=_options(self))
                return old, int(found)
        if self.current_as_of(dt) == 0:
            return dt, 0
        return DeltaTable(dt.table_uri, version=0, storage_options=_options(self)), 0  # as made: empty

    def size(self) -> tuple[int, int]:
        """(rows, bytes) of ``current`` plus the changes it does not fold in yet, from the add actions alone."""
        rows = size = 0
        for dt in (self.current(), self.changes()):
            actions = pa.table(dt.get_add_actions(flatten=True))
            if actions.num_rows:
                rows += int(pc.sum(actions["num_records"]).as_py() or 0)
                size += int(pc.sum(actions["size_bytes"]).as_py() or 0)
        return rows, size


class TailRetired(rules.StateError):
    """The changes a reader asked for were folded into ``current`` and retired; read from ``current``."""


def _in_range(action: dict[str, Any], after: int, upto: int) -> bool:
    low, high = action.get(f"min.{rules.SEGMENT}"), action.get(f"max.{rules.SEGMENT}")
    if low is None or high is None:
        return True
    return bool(high > after and low <= upto)


def _of_fraction(action: dict[str, Any], fraction: Fraction | None) -> bool:
    if fraction is None:
        return True
    factor, bucket = action.get("partition.factor"), action.get("partition.key_bucket")
    if factor is None or bucket is None:
        return True
    return overlaps(fraction, int(factor), int(bucket))


def _options(tables: StateTables) -> dict[str, str] | None:
    return tables.home.store.delta_options()


def disjoint(ordered: list[dict[str, Any]]) -> bool:
    """Whether files (add actions sorted by their lowest key hash) hold disjoint hash ranges, in order: what
    ``write_files`` writes, and what lets a reader stream a state file by file."""
    for a, b in itertools.pairwise(ordered):
        high, low = a.get(f"max.{rules.KEY_HASH}"), b.get(f"min.{rules.KEY_HASH}")
        if high is None or low is None or not high < low:
            return False
    return all(a.get(f"min.{rules.KEY_HASH}") is not None for a in ordered)


def fraction_mask(hashes: pa.ChunkedArray | pa.Array, fraction: Fraction) -> pa.Array:
    """Which rows (by their ``key_hash``) hold keys of ``fraction``, as a mask for ``filter``."""
    values = hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes
    return pa.array(in_fraction(values.to_numpy(zero_copy_only=False), fraction.bucket, fraction.factor))


def one_file(path: str) -> Callable[[dict[str, Any]], bool]:
    """A ``read_delta`` filter that keeps one data file."""
    return lambda action: bool(action["path"] == path)


def removes(actions: Iterable[dict[str, Any]], partitions: Sequence[str] = ()) -> list[RemoveAction]:
    """Remove actions for whole files (by their flattened add actions): retirement, never a rewrite."""
    now = int(time.time() * 1000)
    return [
        RemoveAction(
            path=a["path"],
            data_change=True,
            deletion_timestamp=now,
            size=int(a["size_bytes"]),
            partition_values={
                p: None if a.get(f"partition.{p}") is None else str(a[f"partition.{p}"]) for p in partitions
            },
        )
        for a in actions
    ]
