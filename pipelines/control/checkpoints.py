"""The ``checkpoints`` table: the next position to read per job, model version, SSP and key bucket.

A row per (SSP, key bucket) per committed micro-batch; a bucket's latest
checkpoint is its row with the highest ``batch_id``. Planning a version writes
its start checkpoints as batch ``INITIAL_BATCH`` (-1), so every model version
covers its whole key space from the moment it exists; only the active
version's checkpoints are trusted. Positions are stored as the input system
made them (opaque strings).

Start checkpoints are written more than once: by the planner (an Airflow
worker, the CLI) and again by the driver that carries the old model's final
checkpoints forward (another host, seconds later). The later write must win,
and the hosts' clocks cannot say which is later, so each write of a version's
start checkpoints carries the next number of a sequence (``seq``), committed
under the app transaction ``start:<job>:v<version>``: two writers never get the
same number, and the highest is the last written. ``written_at`` (the store's
time) is shown, never compared; it orders only rows no number orders, start
rows written before the column existed.

Rows a reader never asks for again are deleted (``prune_superseded``): every
reader wants a bucket's latest row or a version's start rows, so a bucket's
batch rows older than its latest batch row are dead weight that every read of
the version would otherwise load and sort (docs/storage.md, "Control tables
over time").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, check_int, column, delete_rows, sql_text
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.ssp import NO_BUCKET, SystemStreamPartition, validate_name
from pipelines.deltaio import read_delta
from pipelines.errors import ModelError
from pipelines.storage.clock import StoreClock
from pipelines.storage.home import Home

INITIAL_BATCH = -1
"""``batch_id`` of a model version's start checkpoints (written when the version is planned, or carried forward)."""

CHECKPOINTS = TableSpec(
    "checkpoints",
    pa.schema(
        [
            column("job", pa.string()),
            column("model_version", pa.int64()),
            column("system", pa.string()),
            column("stream", pa.string()),
            column("partition", pa.int32()),
            column("key_bucket", pa.int32()),  # NO_BUCKET (-1): the whole partition
            column("factor", pa.int32()),
            column("offset", pa.string()),  # next position to read, in the input system's own format
            column("batch_id", pa.int64()),  # INITIAL_BATCH (-1): start checkpoints of the version
            column("written_at", TIMESTAMP),
            column("seq", pa.int64(), nullable=True),  # start rows: 1, 2, ... per version in commit order; else NULL
        ]
    ),
    "Next offset to read per job, model version, (SSP, key bucket); latest = highest (batch_id, seq)",
)


class Checkpoints:
    """Write a batch's checkpoints and read where a model version stands."""

    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self.table = ControlTable(CHECKPOINTS, home, clock)

    def write(self, job: str, version: int, checkpoints: CheckpointMap, batch_id: int) -> None:
        """Append one batch's checkpoints in one commit; partial maps (only advanced buckets) are fine.

        Start checkpoints (``INITIAL_BATCH``) get the version's next start
        sequence number, so the last one written wins whatever the clocks say.
        """
        validate_name("job", job)
        check_int("model version", version, 0)
        check_int("batch id", batch_id, INITIAL_BATCH)
        factor = checkpoints.factor
        if not checkpoints.offsets:
            raise ModelError(f"no checkpoints to write for job {job!r} version {version} batch {batch_id}")
        now = self.table.now()
        rows = []
        for ssp, offset in checkpoints.offsets.items():
            if factor > 1 and ssp.key_bucket is None:
                raise ModelError(f"checkpoint for {ssp} needs a key bucket: the factor is {factor}")
            bucket = NO_BUCKET if factor == 1 else ssp.bucket_column
            if bucket >= factor:
                raise ModelError(f"checkpoint for {ssp} has key bucket >= factor {factor}")
            if not isinstance(offset, str) or not offset:
                raise ModelError(f"checkpoint for {ssp} must have a non-empty string offset, got {offset!r}")
            rows.append(
                {
                    "job": job,
                    "model_version": version,
                    "system": ssp.system,
                    "stream": ssp.stream,
                    "partition": ssp.partition,
                    "key_bucket": bucket,
                    "factor": factor,
                    "offset": offset,
                    "batch_id": batch_id,
                    "written_at": now,
                    "seq": None,
                }
            )
        if batch_id != INITIAL_BATCH:
            self.table.append(rows)
            return
        self.table.append_next(
            f"start:{job}:v{version}",
            lambda: self._last_start_seq(job, version),
            lambda seq: [{**r, "seq": seq} for r in rows],
        )

    def _last_start_seq(self, job: str, version: int) -> int:
        where = [("model_version", "=", version), ("batch_id", "=", INITIAL_BATCH)]
        seqs = [s for s in self.table.read(job, where, ["seq"]).column("seq").to_pylist() if s is not None]
        return max(seqs, default=0)

    def latest(self, job: str, version: int) -> CheckpointMap:
        """The next position of every (SSP, key bucket) of one model version: its latest row each."""
        return self.latest_with_batch(job, version)[0]

    def latest_with_batch(self, job: str, version: int) -> tuple[CheckpointMap, int]:
        """``latest`` and the highest batch among its rows (-1: only the start checkpoints), from one read: what a
        check that reads other tables as of that batch (the state check) needs to agree with."""
        rows = self._rows(job, version)
        if rows.num_rows == 0:
            raise ModelError(
                f"job {job!r} model version {version} has no checkpoints; a version gets its start checkpoints "
                "(batch -1) when it is planned, so it was planned outside a rescale or the rescale did not finish"
            )
        latest: dict[SystemStreamPartition, tuple[int, str]] = {}
        for r in _in_write_order(rows):
            ssp = SystemStreamPartition.from_columns(r["system"], r["stream"], r["partition"], r["key_bucket"])
            latest[ssp] = (r["factor"], r["offset"])
        factors = {f for f, _ in latest.values()}
        if len(factors) != 1:
            raise ModelError(f"checkpoints of job {job!r} version {version} mix elasticity factors {sorted(factors)}")
        result = CheckpointMap(factors.pop(), {ssp: off for ssp, (_, off) in latest.items()})
        try:
            result.check_complete()
        except ModelError as e:
            raise ModelError(f"checkpoints of job {job!r} version {version} are incomplete: {e}") from None
        return result, max(rows.column("batch_id").to_pylist())

    def latest_batch(self, job: str, version: int) -> int | None:
        """The highest batch whose checkpoints are stored (-1: only the start checkpoints), None if none."""
        rows = self._rows(job, version, ["batch_id"])
        return max(rows.column("batch_id").to_pylist()) if rows.num_rows else None

    def start(self, job: str, version: int) -> dict[SystemStreamPartition, str]:
        """Where a version started reading, per (SSP, key bucket): its latest start-checkpoint row (batch -1).

        Planning writes the migrated start, and a driver that switches in place
        rewrites it from the old model's final checkpoints (carry-forward); the
        rewrite is where the version really started, and the superseded row
        may lie far behind it.
        """
        where = [("model_version", "=", version), ("batch_id", "=", INITIAL_BATCH)]
        return {  # oldest first: the latest row of each bucket wins
            SystemStreamPartition.from_columns(r["system"], r["stream"], r["partition"], r["key_bucket"]): r["offset"]
            for r in _in_write_order(self.table.read(job, where))
        }

    def _rows(self, job: str, version: int, columns: Sequence[str] | None = None) -> pa.Table:
        return self.table.read(job, [("model_version", "=", version)], columns)


def _in_write_order(rows: pa.Table) -> list[dict[str, Any]]:
    """Rows oldest first: by batch, then by start sequence (NULL, i.e. before the column existed, first).

    ``written_at`` breaks only the ties no number orders: start rows older
    than the sequence, and the identical rows of a batch Spark replayed.
    """
    return sorted(
        rows.to_pylist(), key=lambda r: (r["batch_id"], r["seq"] if r["seq"] is not None else 0, r["written_at"])
    )


_BUCKET = ["model_version", "system", "stream", "partition", "key_bucket"]
# A delete names stale buckets as ``partition IN (...) AND key_bucket IN (...)`` per set of partitions with the same
# stale buckets (one clause when every bucket advances with every batch): one clause per bucket took 25 s for 1,024
# buckets. No arithmetic or cast on a column: delta-rs writes the predicate into its commit and parses it again when
# a concurrent commit is checked against it, and neither comes back in a form it parses ("int64", "INT64").


def prune_superseded(dt: DeltaTable, job: str) -> int:
    """Delete ``job``'s checkpoint rows of a batch older than the latest batch of their bucket; rows deleted.

    Kept: every start row (batch -1: ``start`` reads them all, and the start
    sequence counts them) and each bucket's latest batch row, replays of that
    batch included, so ``latest``, ``latest_batch`` and ``start`` answer as
    before. One delete commit (``table.delete_rows``: run again if an append
    lands beside it).
    """
    validate_name("job", job)
    rows = read_delta(dt, [("job", "=", job), ("batch_id", ">=", 0)], [*_BUCKET, "batch_id"])
    if rows.num_rows == 0:
        return 0
    latest = rows.group_by(_BUCKET).aggregate([("batch_id", "max"), ("batch_id", "min")])
    stale = latest.filter(pc.less(latest.column("batch_id_min"), latest.column("batch_id_max")))
    if stale.num_rows == 0:
        return 0
    buckets: dict[tuple[int, str, str, int], dict[int, set[int]]] = {}  # (version, stream, latest) -> partitions
    for r in stale.to_pylist():
        key = (r["model_version"], r["system"], r["stream"], r["batch_id_max"])
        buckets.setdefault(key, {}).setdefault(r["partition"], set()).add(r["key_bucket"])
    clauses = []
    for (version, system, stream, last), by_partition in sorted(buckets.items()):
        alike: dict[frozenset[int], list[int]] = {}  # partitions with the same stale buckets: one clause
        for partition, keys in by_partition.items():
            alike.setdefault(frozenset(keys), []).append(partition)
        clauses += [
            f"(model_version = {version} AND system = {sql_text(system)} AND stream = {sql_text(stream)} "
            f'AND batch_id < {last} AND "partition" IN ({_numbers(partitions)}) AND key_bucket IN ({_numbers(keys)}))'
            for keys, partitions in alike.items()
        ]
    predicate = f"job = {sql_text(job)} AND batch_id >= 0 AND ({' OR '.join(clauses)})"
    return delete_rows(dt, predicate)


def _numbers(values: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(values)))
