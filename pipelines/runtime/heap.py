"""Keep Spark's garbage collection after every task cheap in the Python workers that run ours.

A reused PySpark worker runs a full ``gc.collect()`` after every task
(``pyspark/daemon.py``). A full collection walks every container object the
process holds: with pyarrow, pandas, deltalake and our modules loaded that is
about 80,000 objects and 40 ms of CPU here, paid after each of a micro-batch's
reader and writer tasks (32 of them at factor 8 over two partitions: 1.3 CPU-s
a batch, more than a small batch's own work) and after its commit. Nearly all
of those objects are modules, classes and caches that live as long as the
worker. So once one of our tasks is done, what survives a collection moves to
the permanent generation (``gc.freeze``), which collections skip.

Anything frozen that later becomes cyclic garbage is only found when the
frozen set is examined again: whenever the process imported modules since the
last freeze (new long-lived objects), and after every ``REFRESH_TASKS`` tasks,
so a worker never holds more than that many tasks' cyclic garbage.
"""

from __future__ import annotations

import gc
import os
import sys

REFRESH_TASKS = 100


class _Settled:
    pid = 0
    modules = 0
    tasks = 0


def settle() -> bool:
    """Called at the end of each of our tasks; True when it froze the heap again (a refresh)."""
    state = _Settled
    state.tasks += 1
    if state.pid == os.getpid() and state.modules == len(sys.modules) and state.tasks < REFRESH_TASKS:
        return False
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    state.pid, state.modules, state.tasks = os.getpid(), len(sys.modules), 0
    return True
