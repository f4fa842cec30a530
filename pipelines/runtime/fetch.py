"""Read once, route many: one fetch of a partition's range per micro-batch, shared by its key buckets' tasks.

SEP-32 names the cost of reading a partition once per virtual task: at
factor 8 it is 8x the broker egress, and on Kinesis 8x the GetRecords calls
against a 5 calls/s per-shard limit. So the virtual tasks of one partition
share one fetch of its range. The first of them to arrive *claims* the range
(an exclusive create in the staging folder), reads it from the input system
once, computes every record's key bucket once, and writes the records grouped
by bucket (stable, so each bucket keeps the input order) to an Arrow IPC file
with an index; its siblings wait for the index, then map the file and take
their bucket's slice. The staging folder lives in the home, which every
driver and executor of a deployment shares (the sinks live there too), so
this holds on a multi-executor cluster as in ``local[N]``: a range is fetched
once per micro-batch, cluster-wide. A claimer that dies is replaced: a
sibling takes the claim over when its holder's process is gone (same host)
or its lease ran out.

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
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.control.home import Home
from pipelines.core.hashing import key_buckets
from pipelines.core.positions import Position
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import StreamError
from pipelines.runtime.offsets import Offset, Pending
from pipelines.systems.base import RECORD_SCHEMA, InputSystem, ReadResult

CLAIM_LEASE_S = 300.0
"""A claim older than this with no index is taken over: its holder is presumed dead (another host)."""
PIN_KEEP_S = 600.0
"""Pins older than this that no offset refers to are collected; replays only ever need the last batches'."""


def staging_root(home: Home, job: str, version: int) -> Path:
    return home.root / "staging" / job / f"v{version}"


def _pins(home: Home, job: str, version: int) -> Path:
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


def fetch(
    system: InputSystem,
    home: Home,
    job: str,
    version: int,
    ssp: SystemStreamPartition,
    start: Position,
    end: Offset,
    *,
    factor: int,
    shared: bool,
) -> Fetched:
    """The records of whole partition ``ssp`` from ``start`` to ``end``, fetched once for all its key buckets.

    ``shared``: several virtual tasks read this range (factor > 1), so it is
    staged for them, grouped by key bucket at ``factor``.
    """
    if not shared:
        t0 = time.perf_counter_ns()
        result = _read_pinned(system, home, job, version, ssp, start, end)
        return Fetched(
            result.records,
            result.next_position,
            records_fetched=result.records.num_rows,
            bytes_fetched=result.bytes_fetched,
            read_ns=time.perf_counter_ns() - t0,
            stats=dict(result.stats),
        )
    stage = staging_root(home, job, version) / _digest(ssp, start, end)
    waited = 0
    backoff = 0.002
    while True:
        staged = _load(stage)
        if staged is not None:
            staged.wait_ns = waited
            return staged
        if _claim(stage):
            try:
                fetched = _fetch_and_stage(system, home, job, version, ssp, start, end, factor, stage)
            except BaseException:
                with contextlib.suppress(OSError):
                    (stage / "claim").unlink()
                raise
            fetched.wait_ns = waited
            return fetched
        t0 = time.perf_counter_ns()
        time.sleep(backoff)
        backoff = min(backoff * 2, 0.05)
        waited += time.perf_counter_ns() - t0


def _fetch_and_stage(
    system: InputSystem,
    home: Home,
    job: str,
    version: int,
    ssp: SystemStreamPartition,
    start: Position,
    end: Offset,
    factor: int,
    stage: Path,
) -> Fetched:
    t0 = time.perf_counter_ns()
    result = _read_pinned(system, home, job, version, ssp, start, end)
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
    tmp = stage / f"data.{uuid.uuid4().hex}.tmp"
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)
    os.replace(tmp, stage / "data.arrow")
    index = {
        "next_position": result.next_position,
        "buckets": {str(b): list(r) for b, r in rows.items()},
        "records": records.num_rows,
        "bytes": result.bytes_fetched,
        "stats": dict(result.stats),
    }
    _write_atomically(stage / "index.json", json.dumps(index))
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


def _load(stage: Path) -> Fetched | None:
    try:
        index = json.loads((stage / "index.json").read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    table = pa.ipc.open_file(pa.memory_map(str(stage / "data.arrow"))).read_all()
    rows = {int(b): (int(r[0]), int(r[1])) for b, r in index["buckets"].items()}
    return Fetched(
        table.select(RECORD_SCHEMA.names),
        index["next_position"],
        buckets=table.column("bucket").combine_chunks() if table.num_rows else None,
        bucket_rows=rows,
        stage=str(stage),
    )


def _claim(stage: Path) -> bool:
    """Take the right to fetch this range: True for exactly one live claimer at a time."""
    stage.mkdir(parents=True, exist_ok=True)
    claim = stage / "claim"
    me = f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex}"
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        if not _claim_is_dead(claim):
            return False
        tmp = stage / f"claim.{uuid.uuid4().hex}.tmp"
        tmp.write_text(me)
        os.replace(tmp, claim)  # take over; two takers race, the one whose name stays wins
        time.sleep(0.01)
        return claim.read_text() == me
    with os.fdopen(fd, "w") as f:
        f.write(me)
    return True


def _claim_is_dead(claim: Path) -> bool:
    try:
        host, pid, _ = claim.read_text().split(" ", 2)
        age = time.time() - claim.stat().st_mtime
    except (OSError, ValueError):
        return False  # being written, or just removed: look again
    if host == socket.gethostname():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError):
            pass
        return False
    return age > CLAIM_LEASE_S


def _read_pinned(
    system: InputSystem, home: Home, job: str, version: int, ssp: SystemStreamPartition, start: Position, end: Offset
) -> ReadResult:
    """Read ``[start, end)``; a pending end is read up to its pin, or read and pinned if it has none yet."""
    if not isinstance(end, Pending):
        return system.read(ssp.stream, ssp.partition, start, end)
    pinned = read_pin(home, job, version, end.pin)
    if pinned is not None:
        return system.read(ssp.stream, ssp.partition, start, pinned)
    result = system.read(ssp.stream, ssp.partition, start, end.bounded)
    won = write_pin(home, job, version, end.pin, result.next_position)
    if won != result.next_position:  # a sibling pinned first (another executor): read exactly what it pinned
        return system.read(ssp.stream, ssp.partition, start, won)
    return result


def read_pin(home: Home, job: str, version: int, pin: str) -> Position | None:
    try:
        return json.loads((_pins(home, job, version) / f"{pin}.json").read_text())["next_position"]
    except FileNotFoundError:
        return None


def write_pin(home: Home, job: str, version: int, pin: str, position: Position) -> Position:
    """Pin a pending end at ``position`` unless it is pinned already; returns the pinned position."""
    folder = _pins(home, job, version)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{pin}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps({"next_position": position, "at": time.time()}))
    try:
        os.link(tmp, folder / f"{pin}.json")  # fails if it exists: the first pin wins, atomically
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    pinned = read_pin(home, job, version, pin)
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


def remove_stages(stages: list[str]) -> None:
    """Drop staged ranges whose batch is committed (a replay fetches again, or reads up to the same pin)."""
    for stage in stages:
        path = Path(stage)
        for name in ("data.arrow", "index.json", "claim"):
            with contextlib.suppress(OSError):
                (path / name).unlink()
        with contextlib.suppress(OSError):
            path.rmdir()


def collect_pins(home: Home, job: str, version: int, keep: set[str], older_than_s: float = PIN_KEEP_S) -> int:
    """Remove old pins no offset refers to; returns how many went."""
    folder = _pins(home, job, version)
    if not folder.is_dir():
        return 0
    removed = 0
    cutoff = time.time() - older_than_s
    for entry in os.scandir(folder):
        pin = entry.name.split(".", 1)[0]
        if pin in keep:
            continue
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
    return removed


def _digest(ssp: SystemStreamPartition, start: Position, end: Offset) -> str:
    end_text = json.dumps(end.to_json(), sort_keys=True) if isinstance(end, Pending) else end
    return hashlib.sha1(f"{ssp.wire()}|{start}|{end_text}".encode()).hexdigest()[:24]


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
