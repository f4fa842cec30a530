"""A micro-batch's manifest: the files its first run wrote for each table, so every table commits the same run's.

A batch that writes to more than one table (the sink and its dead letters, a state's changes) commits each in a
Delta transaction of its own: Delta has none across tables. Each commit is idempotent (its application
transaction), so a driver that dies between two of them re-runs the batch, skips the committed tables and
commits the others; but those would get the *re-run's* files, and a function that is not deterministic (a
remote call, a clock, a random draw) could then leave sink rows of one run beside state changes of another.
So before the first commit the batch's files are named in one record, created with a write only one writer
can win; a re-run finds it and commits its files instead of its own (whose files are never added: Delta's
vacuum removes them). The record is removed once every table and the checkpoints hold the batch.
docs/design.md, "Delivery".
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pipelines.runtime.requests import run_dir
from pipelines.storage.home import Home
from pipelines.storage.location import Location


def _place(home: Home, job: str, app_id: str, batch_id: int) -> Location:
    digest = hashlib.sha256(app_id.encode()).hexdigest()[:24]
    return run_dir(home) / "batches" / job / f"{digest}-{batch_id}.json"


def settle(home: Home, job: str, app_id: str, batch_id: int, files: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The files of batch ``(app_id, batch_id)`` in force: ``files`` if this run named them first, else the ones
    an earlier run of the batch named; and whether they are this run's."""
    place = _place(home, job, app_id, batch_id)
    body = json.dumps({"app_id": app_id, "batch_id": batch_id, "files": files}, sort_keys=True).encode()
    if home.store.create(place, body):
        return files, True
    earlier = json.loads(home.store.read(place))
    if earlier.get("app_id") != app_id or earlier.get("batch_id") != batch_id:  # a digest's collision: never seen
        raise RuntimeError(f"the manifest {place} names another batch ({earlier.get('app_id')})")
    named: dict[str, Any] = earlier["files"]
    return named, False


def remove(home: Home, job: str, app_id: str, batch_id: int) -> None:
    """Forget a batch's manifest once every table and the checkpoints hold the batch."""
    home.store.delete(_place(home, job, app_id, batch_id))
