"""Read once, route many: one fetch of a partition's range per micro-batch, shared by its key buckets' tasks.

SEP-32 names the cost of reading a partition once per virtual task: at
factor 8 it is 8x the broker egress, and on Kinesis 8x the GetRecords calls
against a 5 calls/s per-shard limit. So the virtual tasks of one partition
share one fetch of its range. The first of them to arrive *claims* the range
(a lease created in the home's store, ``storage.records``), reads it from the
input system once, computes every record's key bucket once, and writes the
records grouped by bucket (stable, so each bucket keeps the input order) to
an Arrow IPC file, one record batch per bucket, with an index; its siblings
wait for the index, then read their bucket's batch only (a ranged read on
object storage, a mapped file on a local disk). The staging area lives in
the home, which every driver and executor of a deployment shares, so this
holds on a multi-host cluster as in ``local[N]``: a range is fetched once per
micro-batch, cluster-wide. The claimer beats while it fetches; a claimer
whose beat stands still for ``CLAIM_LEASE_S`` (measured by the waiter's own
clock) is taken over by exactly one waiter (docs/storage.md).

Pins. A ``Bounded`` end ("at most N records") is named by reading; the
first read of it writes a *pin*, the position it ended at, with a create
that only one writer can win. Every later read of that batch (a sibling on
another executor, a replay after a crash) reads exactly up to the pin, so a
micro-batch is the same records however often it runs. The driver resolves
a batch's pinned start positions the same way before it plans the next.

A factor-1 task is the only reader of its range: it reads directly (and
pins, for a bounded end), with no staging.

Staged files are removed by the driver once the batch's checkpoints are
written (``remove_stages``); pins are kept a while for replays and then
collected (``collect_pins``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.core.hashing import key_buckets
from pipelines.core.positions import Position
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import StreamError
from pipelines.runtime.offsets import Offset, Pending
from pipelines.storage import records
from pipelines.storage.home import Home
from pipelines.storage.location import Location, parse
from pipelines.systems.base import RECORD_SCHEMA, InputSystem, ReadResult

CLAIM_LEASE_S = 20.0
"""A claim whose beat stood still this long (on the waiter's clock) with no index is taken over: its holder died."""
CLAIM_BEAT_S = 2.0
"""How often a claimer beats while it fetches."""
PIN_KEEP_S = 600.0
"""Pins this much older than the newest pin (by the store's clock) that no offset refers to are collected."""


def staging_root(home: Home, job: str, version: int) -> Location:
    return home.root / "staging" / job / f"v{version}"


def _pins(home: Home, job: str, version: int) -> Location:
    return staging_root(home, job, version) / "pins"


@dataclass
class Fetched:
    """A partition range as one task sees it: its records, the position after them, and what fetching cost."""

    records: pa.Table  # RECORD_SCHEMA
    next_position: Position
    buckets: pa.Array | None = None  # each record's key bucket, when the range was fetched for several buckets
    bucket_rows: dict[int, tuple[int, int]] = field(default_factory=dict)  # bucket -> (first row, rows)
    records_fetched: int = 0  # records this call read from the input system (0 if a sibling fetched)
    bytes_fetched: int = 0
    read_ns: int = 0
    key_hash_ns: int = 0
    wait_ns: int = 0
    stage: str | None = None
    stats: dict[str, float] = field(default_factory=dict)

    def bucket(self, b: int) -> pa.Table:
        first, rows = self.bucket_rows.get(b, (0, 0))
        return self.records.slice(first, rows)


@dataclass(frozen=True)
class RangeRead:
    """One task's range of a partition: what is read, from which system, on behalf of which job version (whose
    staging area and pins it uses)."""

    system: InputSystem
    home: Home
    job: str
    version: int
    ssp: SystemStreamPartition
    start: Position
    end: Offset

    def read(self) -> ReadResult:
        """Read ``[start, end)``; a pending end is read up to its pin, or read and pinned if it has none yet."""
        stream, partition = self.ssp.stream, self.ssp.partition
        if not isinstance(self.end, Pending):
            return self.system.read(stream, partition, self.start, self.end)
        pinned = read_pin(self.home, self.job, self.version, self.end.pin)
        if pinned is not None:
            return self.system.read(stream, partition, self.start, pinned)
        result = self.system.read(stream, partition, self.start, self.end.bounded)
        won = write_pin(self.home, self.job, self.version, self.end.pin, result.next_position)
        if won != result.next_position:  # a sibling pinned first (another executor): read exactly what it pinned
            return self.system.read(stream, partition, self.start, won)
        return result

    def stage(self) -> Location:
        """Where this range is staged for its key buckets' tasks."""
        return staging_root(self.home, self.job, self.version) / _digest(self.ssp, self.start, self.end)


def fetch(wanted: RangeRead, *, factor: int, shared: bool, bucket: int | None = None) -> Fetched:
    """The records of whole partition ``ssp`` from ``start`` to ``end``, fetched once for all its key buckets.

    ``shared``: several virtual tasks read this range (factor > 1), so it is
    staged for them, grouped by key bucket at ``factor``. ``bucket``: the one
    bucket the caller wants of a staged range (a sibling then reads that
    bucket's record batch only); ``Fetched.bucket(b)`` gives it either way.
    """
    if not shared:
        t0 = time.perf_counter_ns()
        result = wanted.read()
        return Fetched(
            result.records,
            result.next_position,
            records_fetched=result.records.num_rows,
            bytes_fetched=result.bytes_fetched,
            read_ns=time.perf_counter_ns() - t0,
            stats=dict(result.stats),
        )
    home, stage = wanted.home, wanted.stage()
    store = home.store
    waited = 0
    # Each look is a request on object storage: start later and wait longer between looks there.
    backoff, ceiling = (0.002, 0.05) if store.is_local() else (0.02, 0.2)
    watch = records.Watch(store, stage / "claim", CLAIM_LEASE_S)
    lease = records.take(store, stage / "claim")
    holder, last_check = 0, time.monotonic()
    while lease is None:
        staged = _load(home, stage, bucket)
        if staged is not None:
            staged.wait_ns = waited
            return staged
        if time.monotonic() - last_check >= CLAIM_BEAT_S:  # the holder's beat can only change this often
            last_check = time.monotonic()
            holder = watch.current(holder)
            if watch.expired(holder):
                lease = watch.take_over(holder)  # its holder died: exactly one waiter fetches instead
                if lease is not None:
                    break
        t0 = time.perf_counter_ns()
        time.sleep(backoff)
        backoff = min(backoff * 2, ceiling)
        waited += time.perf_counter_ns() - t0
    staged = _load(home, stage, bucket)  # a dead holder may have staged it after all
    if staged is not None:
        lease.stop()
        staged.wait_ns = waited
        return staged
    lease.keep_alive(CLAIM_BEAT_S)
    try:
        fetched = _fetch_and_stage(wanted, factor, stage)
    except BaseException:
        lease.release()  # a retry (or a sibling) fetches at once instead of waiting out the lease
        raise
    lease.stop()
    fetched.wait_ns = waited
    return fetched


def _fetch_and_stage(wanted: RangeRead, factor: int, stage: Location) -> Fetched:
    t0 = time.perf_counter_ns()
    result = wanted.read()
    t1 = time.perf_counter_ns()
    records = result.records
    buckets = key_buckets(records.column("key").to_pylist(), records.column("offset").to_pylist(), factor)
    bucket_array = pa.array(buckets, pa.int32())
    order = pc.sort_indices(pa.table({"b": bucket_array}), sort_keys=[("b", "ascending")])  # stable
    grouped = records.take(order)
    grouped_buckets = bucket_array.take(order)
    counts: dict[int, int] = {}
    for b in buckets:
        counts[b] = counts.get(b, 0) + 1
    rows, first = {}, 0
    for b in sorted(counts):
        rows[b] = (first, counts[b])
        first += counts[b]
    t2 = time.perf_counter_ns()
    data = grouped.append_column("bucket", grouped_buckets)
    store = wanted.home.store
    store.makedirs(stage)
    batches: dict[str, int] = {}
    with (
        store.filesystem().open_output_stream(store.arrow_path(stage / "data.arrow")) as sink,
        pa.ipc.new_file(sink, data.schema) as writer,
    ):  # one record batch per bucket, so a sibling reads its own bucket only
        for i, (b, (first_row, count)) in enumerate(sorted(rows.items())):
            writer.write_batch(data.slice(first_row, count).combine_chunks().to_batches()[0])
            batches[str(b)] = i
    index = {
        "next_position": result.next_position,
        "buckets": {str(b): list(r) for b, r in rows.items()},
        "batches": batches,
        "records": records.num_rows,
        "bytes": result.bytes_fetched,
        "stats": dict(result.stats),
    }
    store.write(stage / "index.json", json.dumps(index).encode())  # the index last: the data is whole by then
    return Fetched(
        grouped,
        result.next_position,
        buckets=grouped_buckets,
        bucket_rows=rows,
        records_fetched=records.num_rows,
        bytes_fetched=result.bytes_fetched,
        read_ns=t1 - t0,
        key_hash_ns=t2 - t1,
        stage=str(stage),
        stats=dict(result.stats),
    )


def _load(home: Home, stage: Location, bucket: int | None = None) -> Fetched | None:
    """The staged range, once its index is there: every bucket's records, or only ``bucket``'s record batch."""
    store = home.store
    try:
        index = json.loads(store.read(stage / "index.json"))
    except FileNotFoundError:
        return None
    path = store.arrow_path(stage / "data.arrow")
    source = pa.memory_map(path) if store.is_local() else store.filesystem().open_input_file(path)
    rows = {int(b): (int(r[0]), int(r[1])) for b, r in index["buckets"].items()}
    with contextlib.closing(source):
        reader = pa.ipc.open_file(source)
        batch_of = index.get("batches", {})
        if bucket is not None and str(bucket) in batch_of:
            table = pa.Table.from_batches([reader.get_batch(int(batch_of[str(bucket)]))])
            rows = {bucket: (0, table.num_rows)}  # the one bucket, from the first row of what was read
        elif bucket is not None and bucket not in rows:
            table = reader.schema.empty_table()  # no record of this range falls in the bucket
            rows = {}
        else:
            table = reader.read_all()
    return Fetched(
        table.select(RECORD_SCHEMA.names),
        index["next_position"],
        buckets=table.column("bucket").combine_chunks() if table.num_rows else None,
        bucket_rows=rows,
        stage=str(stage),
    )


def read_pin(home: Home, job: str, version: int, pin: str) -> Position | None:
    try:
        pinned: Position = json.loads(home.store.read(_pins(home, job, version) / f"{pin}.json"))["next_position"]
    except FileNotFoundError:
        return None
    return pinned


def write_pin(home: Home, job: str, version: int, pin: str, position: Position) -> Position:
    """Pin a pending end at ``position`` unless it is pinned already; returns the pinned position."""
    home.store.create(_pins(home, job, version) / f"{pin}.json", json.dumps({"next_position": position}).encode())
    pinned = read_pin(home, job, version, pin)  # ours, or the first writer's: the first pin wins
    if pinned is None:
        raise StreamError(f"pin {pin} of job {job} v{version} vanished right after it was written")
    return pinned


def resolve(home: Home, job: str, version: int, offset: Offset) -> Position:
    """The position an offset stands for: itself, or a pending end's pin (which its batch's read wrote)."""
    if not isinstance(offset, Pending):
        return offset
    pinned = read_pin(home, job, version, offset.pin)
    if pinned is None:
        raise StreamError(
            f"job {job} v{version}: the end of a bounded read (pin {offset.pin}) was never pinned, so the batch "
            "that should have read it did not run; restart the job to replay it"
        )
    return pinned


def remove_stages(home: Home, stages: list[str]) -> None:
    """Drop staged ranges whose batch is committed (a replay fetches again, or reads up to the same pin)."""
    store = home.store
    for stage in stages:
        with contextlib.suppress(OSError):
            store.delete_tree(parse(stage, what="a staged range"))


def collect_pins(home: Home, job: str, version: int, keep: set[str], older_than_s: float = PIN_KEEP_S) -> int:
    """Remove pins no offset refers to that are ``older_than_s`` older than the newest; returns how many went.

    Ages are differences of the store's own timestamps, never this host's clock against the store's.
    """
    store = home.store
    entries = [e for e in store.list(_pins(home, job, version)) if not e.is_dir and e.modified is not None]
    if not entries:
        return 0
    newest = max(e.modified for e in entries if e.modified is not None)
    removed = 0
    for entry in entries:
        if entry.name.split(".", 1)[0] in keep or entry.modified is None:
            continue
        if entry.modified < newest - older_than_s:
            with contextlib.suppress(OSError):
                store.delete(entry.location)
                removed += 1
    return removed


def _digest(ssp: SystemStreamPartition, start: Position, end: Offset) -> str:
    end_text = json.dumps(end.to_json(), sort_keys=True) if isinstance(end, Pending) else end
    return hashlib.sha1(f"{ssp.wire()}|{start}|{end_text}".encode()).hexdigest()[:24]
