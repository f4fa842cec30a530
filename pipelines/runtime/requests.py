"""Requests to a running driver, as files under ``<home>/run/``: the home is what every process shares.

* stop (``<job>.stop``): ``pipelines stop`` asks the driver to stop at its next batch boundary and exit.
* drain (``<job>.v<N>.drain``): the driver asks its own query's source to admit no new records, so the
  running micro-batch is the last one and the query can be stopped between batches. Without it a query
  with a short trigger interval is almost never between batches, and stopping it aborts a batch (replayed
  later, so safe, but wasted work and a longer switch). Per model version, so a leftover file can never
  starve the next model's query.
* failure (``<job>.failure``): a driver whose query failed with one of the platform's errors leaves it here
  as JSON (its class and message), so ``pipelines run`` can say what went wrong instead of an exit code.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.control.home import Home


def run_dir(home: Home) -> Path:
    return home.root / "run"


def stop_request(home: Home, job: str) -> Path:
    """The file ``pipelines stop`` creates; the driver removes it when it has stopped."""
    return run_dir(home) / f"{job}.stop"


def drain_request(home: Home, job: str, version: int) -> Path:
    """While this file exists the source of ``job``'s model ``version`` admits nothing new."""
    return run_dir(home) / f"{job}.v{version}.drain"


def failure_note(home: Home, job: str) -> Path:
    """Written by a driver that failed with a platform error; removed when the next run starts."""
    return run_dir(home) / f"{job}.failure"
