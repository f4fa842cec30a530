"""The gate of a query started ahead of an in-place switch: it plans and runs nothing until the driver opens it.

The new model's query starts while the old one finishes its last batch, so Spark's start-up (its Python source
runner's process and imports, a third of a second here) is paid before the downtime instead of inside it. Its
source waits at the gate in every call that could plan or run a batch (``initialOffset``, ``latestOffset``,
``partitions``), so nothing of the new model happens before the old query has stopped and its checkpoints were
carried forward: the order of an in-place switch is unchanged (docs/design.md, "Rescaling is a model switch, not a
redeploy").

The gate is a folder on the driver's host: the source runner is a child of the driver's JVM, on the same host, so
no request to the home's store is spent on it. The folder's name carries the driver's pid, so the next gate made
on the host removes the folders of drivers that died (killed between the ahead start and the switch's end).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pipelines.errors import StreamError
from pipelines.runtime.lifetime import pid_alive

WAIT_S = 600.0
"""The longest a source waits at its gate: the old query's stop at a batch boundary is cut after 60 s."""
LOOK_S = 0.005
READY_S = 30.0
"""The longest the driver lets the old query run on while the new one starts up (then it drains it anyway)."""
READY = "ready"
PREFIX = "pipelines-gate-"
_OWNER = re.compile(r"-pid(\d+)-")


class Gate:
    """A closed gate in a folder of its own; ``open`` lets its query go, ``remove`` cleans up after it."""

    def __init__(self, job: str, version: int, parent: str | None = None) -> None:
        remove_orphans(parent)
        self.folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{job}-v{version}-pid{os.getpid()}-", dir=parent))
        self.path = self.folder / "open"

    def open(self) -> None:
        self.path.touch()

    def wait_ready(self, timeout_s: float, alive: Callable[[], bool]) -> bool:
        """Whether its source made what it needs and reached the gate within ``timeout_s`` (while ``alive``).

        The driver waits for it before it drains the old query, which processes meanwhile: a source runner's
        start-up that outlasts the old query's last batch then adds nothing to the downtime either.
        """
        deadline = time.monotonic() + timeout_s
        ready = self.folder / READY
        while not ready.exists():
            if time.monotonic() > deadline or not alive():
                return False
            time.sleep(LOOK_S)
        return True

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def remove_orphans(parent: str | None = None) -> list[Path]:
    """Remove the gate folders whose driver is no longer running on this host; the ones removed."""
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        owner = _OWNER.search(folder.name)
        if owner is not None and not pid_alive(int(owner.group(1))):
            with contextlib.suppress(OSError):
                shutil.rmtree(folder)
                removed.append(folder)
    return removed


def wait_open(path: str, what: str, timeout_s: float = WAIT_S) -> None:
    """Return once the gate at ``path`` is open; a driver that never opens it fails the query after
    ``timeout_s``."""
    Path(path).with_name(READY).touch()  # reached: the driver may drain the old query now
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise StreamError(
                f"{what}: started ahead of an in-place switch, its driver did not let it go within {timeout_s:g}s: "
                "the driver hung or died between the old query's stop and the carry-forward of its checkpoints; "
                "see the driver's log (the job's next driver carries them forward and starts this model)"
            )
        time.sleep(LOOK_S)
