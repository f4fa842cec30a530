"""What operators see of a job's stores, and the check that a store serves what its stream says.

``describe_stores`` reads only Delta (the store's latest state row, its
snapshots, the job's store checkpoints): no stream is read, nothing is
written, so the CLI (``pipelines store list``) and the Airflow page may call it
while the job runs.

``verify_store`` is the data-quality check: it reads the AD stream up to the
positions the store's latest state reflects, replays the changes in stream
order (``pipelines.core.adjunct.apply_changes``, the reference semantics),
samples keys (present and deleted ones alike), and compares what a fresh
executor's view at that version serves.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pipelines.adjunct.config import StoreConfig
from pipelines.adjunct.durable import DurableStore
from pipelines.adjunct.extract import extract, load_extractor, marker_rows
from pipelines.adjunct.local import LocalEngine
from pipelines.adjunct.views import StoreVersion, view_at
from pipelines.core.adjunct import SampleVerdict, apply_changes, compare_sample, judge_store, sample_keys
from pipelines.errors import ConfigError, StoreError
from pipelines.storage.home import Home


def _configs(home: Home, job: str) -> tuple[StoreConfig, ...]:
    from pipelines.adjunct.runtime import job_stores
    from pipelines.control import ControlPlane
    from pipelines.jobs.config import job_config

    models = ControlPlane(home).job_models
    version = models.active_version(job) or models.latest_version(job)
    if version is None:
        from pipelines.errors import UnknownJobError

        raise UnknownJobError(f"no job {job!r} in {home.control}; create it with 'pipelines job create'")
    try:
        config = job_config(models.get(job, version))
    except ConfigError:  # a model planned before job configs were kept: it has no stores
        return ()
    return job_stores(config)


def describe_stores(home: Home, job: str, now: datetime | None = None) -> list[dict[str, Any]]:
    """One row per configured store: position, size, version, validity, last bootstrap.

    The job is looked up first and the store's clock read only for a store that has a state to judge: reading
    that clock writes a probe (``<home>/_pipelines/clock``), and a refused or empty answer must leave the home
    as it was (a mistyped --home is not made into a new home).
    """
    from pipelines.adjunct.checkpoints import read_store_checkpoints
    from pipelines.adjunct.ingest import store_now

    configs = _configs(home, job)
    checkpoints = read_store_checkpoints(home, job)
    rows = []
    for config in configs:
        durable = DurableStore(home, job, config.name)
        state = durable.latest()
        row: dict[str, Any] = {"store": config.name, "input": str(config.input), **config.to_dict()}
        row.pop("input", None)
        row["input"] = str(config.input)
        if state is None:
            rows.append({**row, "state": "absent"})
            continue
        snapshots = durable.snapshots(state.incarnation)
        written = datetime.fromisoformat(state.written_at)
        now = now or store_now(home)  # the clock a store's written_at is on: the validity age is judged on one clock
        validity = judge_store(
            exists=True,
            last_update=written,
            now=now,
            max_age=config.valid_for,
            fingerprint=state.fingerprint,
            expected_fingerprint=config.fingerprint(),
        )
        committed = checkpoints.get(config.name)
        rows.append(
            {
                **row,
                "state": validity.found.value,
                "validity": validity.reason,
                "incarnation": state.incarnation,
                "version": state.seq,
                "generation": state.serving,
                "positions": dict(state.positions),
                "committed_positions": dict(committed.positions) if committed else None,
                "changes_total": state.total_changes,
                "snapshot_entries": _snapshot_entries(durable, state.incarnation, snapshots),
                "bytes": durable.size_bytes(state.incarnation),
                "written_at": state.written_at,
                "last_bootstrap": None if state.last_bootstrap is None else state.last_bootstrap.to_json(),
                "recovery": state.recovery,
            }
        )
    return rows


def _snapshot_entries(durable: DurableStore, incarnation: str, snapshots: Mapping[int, Any]) -> int | None:
    from pipelines.adjunct.ingest import _entries

    return _entries(durable, incarnation, snapshots) if snapshots else None


def verify_store(
    home: Home, job: str, store: str, *, sample: int = 1000, seed: int = 0, local_dir: str | Path | None = None
) -> SampleVerdict:
    """Compare a sample of lookups with the AD stream's latest value per key, at the store's latest version."""
    from pipelines.adjunct.runtime import job_stores  # noqa: F401  (keeps the import graph one-way)
    from pipelines.control import ControlPlane
    from pipelines.jobs.config import job_config
    from pipelines.systems.registry import JobSystems

    configs = {c.name: c for c in _configs(home, job)}
    if store not in configs:
        raise StoreError(f"job {job!r} has no store {store!r}; its stores: {', '.join(sorted(configs)) or 'none'}")
    config = configs[store]
    if config.bounded:
        raise StoreError(f"store {store!r} holds a bounded dataset: verify compares change streams only, for now")
    state = DurableStore(home, job, store).latest()
    if state is None:
        raise StoreError(f"store {store!r} of job {job!r} was never created; run the job first")
    models = ControlPlane(home).job_models
    model_version = models.active_version(job) or models.latest_version(job)
    if model_version is None:
        raise models.unknown_job(job)  # as ``stores`` above
    settings = job_config(models.get(job, model_version)).systems
    extractor = None if config.extractor == "default" else load_extractor(config.extractor)
    expected: dict[bytes, bytes] = {}
    seen: set[bytes] = set()
    with JobSystems(home, settings) as systems:
        system = systems.of(config.input.system)
        origin = state.origin or {p: m.earliest for p, m in system.describe(config.input.stream).partitions.items()}
        for p, end in sorted(state.positions.items()):
            start = origin.get(p, system.describe(config.input.stream).partitions[p].earliest)
            records = system.read(config.input.stream, p, start, end).records
            cut = set(marker_rows(records))
            if cut:
                keep = [i for i in range(records.num_rows) if i not in cut]
                records = records.take(keep)
            changes = extract(records, extractor, store=store, stream=config.input.stream)
            pairs = list(zip(changes["key"].to_pylist(), changes["value"].to_pylist(), strict=True))
            seen.update(k for k, _ in pairs)
            expected = apply_changes(expected, pairs)
    keys = sample_keys(sorted(seen), sample, seed)
    version = StoreVersion(store, state.incarnation, state.seq, state.serving, state.root, dict(state.positions))
    if local_dir is not None:
        return compare_sample({k: expected.get(k) for k in keys}, _served(home, job, config, version, keys, local_dir))
    with tempfile.TemporaryDirectory(prefix="pipelines-store-verify-") as scratch:  # a fresh executor's view
        return compare_sample({k: expected.get(k) for k in keys}, _served(home, job, config, version, keys, scratch))


def _served(
    home: Home, job: str, config: StoreConfig, version: StoreVersion, keys: list[bytes], local_dir: str | Path
) -> dict[bytes, bytes | None]:
    engine = LocalEngine(Path(local_dir))
    served: dict[bytes, bytes | None] = {}
    if config.partitioned:
        for cls in range(version.root):
            view = view_at(engine, home, job, config, version, partitions=[cls])
            for k, v in zip(keys, view.get_many(keys).to_pylist(), strict=True):
                if v is not None:
                    served[k] = v
        return served
    view = view_at(engine, home, job, config, version)
    return dict(zip(keys, view.get_many(keys).to_pylist(), strict=True))
