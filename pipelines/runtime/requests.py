"""Requests to a running driver, as small records under ``<home>/run/``: the home is all that processes share.

* stop (``<job>.stop``): ``pipelines stop`` asks the job's driver, on whichever host it runs, to stop at its
  next batch boundary and exit; the driver removes it when it has stopped.
* drain (``<job>.v<N>.drain``): the driver asks its own query's source to admit no new records, so the
  running micro-batch is the last one and the query can be stopped between batches. Without it a query
  with a short trigger interval is almost never between batches, and stopping it aborts a batch (replayed
  later, so safe, but wasted work and a longer switch). Per model version, so a leftover record can never
  starve the next model's query, and a driver removes its version's before it starts a query on it: a driver
  killed while it stopped leaves one, and a restart on the same version would otherwise read nothing, ever.
* failure (``<job>.failure``): a driver whose query failed with one of the platform's errors leaves it here
  as JSON (its class and message), so ``pipelines run`` can say what went wrong instead of an exit code.

Each is one object in the home's store (a file on a local disk, a key on S3), so a request reaches a driver
on another host the same way; none carries a pid.
"""

from __future__ import annotations

import json
from typing import Any

from pipelines.storage.home import Home
from pipelines.storage.location import Location


def run_dir(home: Home) -> Location:
    return home.root / "run"


def _stop(home: Home, job: str) -> Location:
    return run_dir(home) / f"{job}.stop"


def _drain(home: Home, job: str, version: int) -> Location:
    return run_dir(home) / f"{job}.v{version}.drain"


def _failure(home: Home, job: str) -> Location:
    return run_dir(home) / f"{job}.failure"


def ask_stop(home: Home, job: str) -> None:
    home.store.write(_stop(home, job), b"stop\n")


def stop_asked(home: Home, job: str) -> bool:
    return home.store.exists(_stop(home, job))


def clear_stop(home: Home, job: str) -> None:
    home.store.delete(_stop(home, job))


def drain(home: Home, job: str, version: int) -> None:
    home.store.write(_drain(home, job, version), b"drain\n")


def draining(home: Home, job: str, version: int) -> bool:
    return home.store.exists(_drain(home, job, version))


def undrain(home: Home, job: str, version: int) -> None:
    home.store.delete(_drain(home, job, version))


def note_failure(home: Home, job: str, error: str, message: str) -> None:
    home.store.write(_failure(home, job), json.dumps({"error": error, "message": message}).encode())


def read_failure(home: Home, job: str) -> dict[str, Any] | None:
    """The failure a job's last driver left, or None (none, or a note cut short: better no claim than a wrong one)."""
    try:
        note = json.loads(home.store.read(_failure(home, job)))
    except (FileNotFoundError, ValueError):
        return None
    return note if isinstance(note, dict) else None


def clear_failure(home: Home, job: str) -> None:
    home.store.delete(_failure(home, job))
