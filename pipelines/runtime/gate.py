"""The gate of a query started ahead of an in-place switch: it plans and runs nothing until the driver opens it.

The new model's query starts while the old one finishes its last batch, so Spark's start-up (its Python source
runner's process and imports, a third of a second here) is paid before the downtime instead of inside it. Its
source waits at the gate in every call that could plan or run a batch (``initialOffset``, ``latestOffset``,
``partitions``), so nothing of the new model happens before the old query has stopped and its checkpoints were
carried forward: the order of an in-place switch is unchanged (docs/design.md, "Switching in place").

The gate is a file on the driver's host: the source runner is a child of the driver's JVM, on the same host, so
no request to the home's store is spent on it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from pipelines.errors import StreamError

WAIT_S = 600.0
"""The longest a source waits at its gate: the old query's stop at a batch boundary is cut after 60 s."""
LOOK_S = 0.005


class Gate:
    """A closed gate in a folder of its own; ``open`` lets its query go, ``remove`` cleans up after it."""

    def __init__(self, job: str, version: int) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=f"pipelines-gate-{job}-v{version}-"))
        self.path = self.folder / "open"

    def open(self) -> None:
        self.path.touch()

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def wait_open(path: str, what: str, timeout_s: float = WAIT_S) -> None:
    """Return once the gate at ``path`` is open; a driver that never opens it fails the query after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise StreamError(f"{what}: started ahead of a switch, its driver did not let it go within {timeout_s:g}s")
        time.sleep(LOOK_S)
