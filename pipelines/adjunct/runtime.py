"""Where a running job meets its stores: the driver names a version per micro-batch, each task looks it up.

Driver (``driver_versions``, called by the elastic source's ``latestOffset``)
    Before a micro-batch is planned, every store of the job is read on from
    its AD stream and appended durably (``AdjunctStores.ingest``); the first
    call bootstraps stores marked ``bootstrap``, so no main-input batch is
    planned before they are filled to the end taken at their open. The
    versions the batch sees go into the batch's end offset under
    ``OFFSET_KEY``. Spark writes that offset to its offset log before the
    batch runs and replays a failed batch with the same offset, so a replay
    sees exactly the same store versions.

    One ``AdjunctStores`` is kept per (home, job) in the driver process, so a
    model switch in the same application (a rescale, an expansion) keeps the
    stores as they are: nothing is re-opened, re-created or re-bootstrapped,
    and the next batch of the new model names the same or newer versions.

Tasks (``task_views``, called by the processing step before the user's function)
    A task learns its batch's versions from its own description: the source
    copies them from the batch's end offset into every ``TaskRange`` it plans
    (so a replay, planned from the same logged offset, carries the same ones),
    and the task's read registers them here (``remember_batch``). It opens its
    views at exactly those versions: the whole store for a broadcast store,
    the task's key bucket of its partitions' classes for a partitioned one.
    The views are what ``TaskContext.stores`` holds. Nothing is read from
    Spark's own checkpoint, which may live on the driver's disk only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from pipelines.adjunct.config import StoreConfig, parse_stores
from pipelines.adjunct.ingest import AdjunctStores
from pipelines.adjunct.views import BatchStores, StoreView, task_stores
from pipelines.errors import StoreError
from pipelines.storage.home import Home

OFFSET_KEY = "stores"
"""Where the store versions sit in the elastic source's offset JSON."""

_DRIVERS: dict[tuple[str, str], tuple[tuple[StoreConfig, ...], AdjunctStores]] = {}
_DRIVERS_LOCK = threading.Lock()


def job_stores(config: Any) -> tuple[StoreConfig, ...]:
    """The stores of a ``JobConfig`` (its ``stores:`` section, checked), in the order written."""
    return parse_stores(config.stores, f"job {config.name}", config.inputs)


def driver_stores(home: Home, config: Any) -> AdjunctStores | None:
    """The driver process's stores of a job, opened once by the recovery table; None when it has none."""
    configs = job_stores(config)
    if not configs:
        return None
    key = (str(home.root), config.name)
    with _DRIVERS_LOCK:
        held = _DRIVERS.get(key)
        if held is not None and held[0] == configs:
            return held[1]
        if held is not None:
            held[1].close()
        from pipelines.adjunct.checkpoints import read_store_checkpoints
        from pipelines.systems.registry import JobSystems

        systems = JobSystems(home, config.systems)
        checkpoints = read_store_checkpoints(home, config.name)
        stores = AdjunctStores.open(home, config.name, configs, systems.of, checkpoints=checkpoints)
        _DRIVERS[key] = (configs, stores)
        return stores


def driver_versions(home: Home, config: Any) -> dict[str, Any] | None:
    """Ingest every store of the job and return the versions the next micro-batch sees (None: no stores)."""
    stores = driver_stores(home, config)
    if stores is None:
        return None
    versions: dict[str, Any] = json.loads(stores.ingest().to_json())
    return versions


def forget_driver(home: Home, job: str) -> None:
    """Drop a job's stores from this driver process (its run ended)."""
    with _DRIVERS_LOCK:
        held = _DRIVERS.pop((str(home.root), job), None)
    if held is not None:
        held[1].close()


# ------------------------------------------------------------------------------------------------------ tasks

_MODELS: dict[tuple[str, str, int], tuple[tuple[StoreConfig, ...], int]] = {}
_BATCHES: dict[tuple[str, str, int, int], BatchStores] = {}
_VIEWS: dict[tuple[Any, ...], dict[str, StoreView]] = {}


def _model_stores(home: Home, job: str, version: int) -> tuple[tuple[StoreConfig, ...], int]:
    key = (str(home.root), job, version)
    if key not in _MODELS:
        from pipelines.control import ControlPlane
        from pipelines.jobs.config import job_config

        model = ControlPlane(home).job_models.get(job, version)
        _MODELS[key] = (job_stores(job_config(model)), model.elasticity_factor)
    return _MODELS[key]


def remember_batch(home: Home, job: str, version: int, batch_id: int, stores: Mapping[str, Any]) -> None:
    """Note the store versions a task's description names for its batch (the processing step looks them up)."""
    key = (str(home.root), job, version, batch_id)
    if key not in _BATCHES:
        if len(_BATCHES) > 64:
            _BATCHES.clear()
        _BATCHES[key] = BatchStores.from_json(dict(stores))


def batch_versions(home: Home, job: str, version: int, batch_id: int) -> BatchStores:
    """The store versions micro-batch ``batch_id`` of a model's query was planned with (``remember_batch``)."""
    found = _BATCHES.get((str(home.root), job, version, batch_id))
    if found is None:
        raise StoreError(
            f"job {job} v{version}: batch {batch_id}'s task came with no store versions; its driver predates the "
            "stores, or the task was not planned by the elastic source"
        )
    return found


def task_views(
    home: str | Home, job: str, version: int, batch_id: int, task: str, records: pa.RecordBatch | pa.Table
) -> Mapping[str, StoreView]:
    """The views a virtual task's process function reads in micro-batch ``batch_id``; empty without stores."""
    home = home if isinstance(home, Home) else Home(home)
    configs, factor = _model_stores(home, job, version)
    if not configs:
        return {}
    partitions = tuple(sorted(set(records.column("partition").to_pylist())))
    bucket = records.column("key_bucket")[0].as_py() if "key_bucket" in records.schema.names else None
    key = (str(home.root), job, version, batch_id, task, partitions)
    views = _VIEWS.get(key)
    if views is None:
        if batch_id < 0:
            raise StoreError(f"job {job}: a task ran outside a streaming micro-batch, so it has no store versions")
        batch = batch_versions(home, job, version, batch_id)
        views = task_stores(
            home, job, list(configs), batch, partitions=_as_list(partitions), bucket=bucket, factor=factor
        )
        if len(_VIEWS) > 256:
            _VIEWS.clear()
        _VIEWS[key] = views
    return views


def _as_list(values: Sequence[int]) -> list[int]:
    return [int(v) for v in values]


def check_job_stores(home: Home, config: Any) -> tuple[StoreConfig, ...]:
    """Refuse a job whose stores cannot run, before it starts: bad settings, unknown streams, not co-partitioned."""
    from pipelines.adjunct.config import validate_stores
    from pipelines.systems.registry import JobSystems

    configs = job_stores(config)
    if configs:
        with JobSystems(home, config.systems) as systems:
            validate_stores(
                configs, config.inputs, lambda s: systems.of(s.system).describe(s.stream), f"job {config.name}"
            )
    return configs


def commit_store_checkpoints(
    home: Home, job: str, version: int, batch_id: int, stores: Mapping[str, Any] | None
) -> int:
    """After the sink committed ``batch_id``: append the store versions it saw (``stores``, from its tasks'
    markers) to the job's checkpoints. Rows appended, 0 without stores.
    """
    from pipelines.adjunct.checkpoints import checkpoint_rows
    from pipelines.control.store_checkpoints import append_store_checkpoints

    if stores is None:
        return 0
    configs, _ = _model_stores(home, job, version)
    if not configs:
        return 0
    from pipelines.storage.clock import store_clock

    now = store_clock(home.root).now()  # the store's time: the validity age is judged on it (``ingest.store_now``)
    rows = checkpoint_rows(job, configs, BatchStores.from_json(dict(stores)), batch_id, now)
    append_store_checkpoints(home, rows)
    return len(rows)
