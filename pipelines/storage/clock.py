"""The store's clock: the one clock every host of a deployment can read, for durations judged across hosts.

Two hosts' wall clocks may be seconds or minutes apart. A time one host wrote
and another compares with its own now is then meaningless: a lease looks
expired while its holder renews it, a live driver looks dead, a dead one
alive. But the store stamps every object it writes with its own clock (S3's
``Last-Modified``; a file's mtime, set by the file server on NFS), so any
process can read the store's time: it writes a probe object and reads its
stamp. Between probes it carries that time on its own boot clock, which
counts seconds (not dates) and does not jump when the wall clock is set.

Every time the control plane judges a duration with (a lease's expiry, a
driver's heartbeat age, an adjunct store's validity age, an expansion's grace
period, the autosizer's windows) is such a store time, written by one process
and compared with the store's now by another: one clock, whichever hosts
they ran on.

Precision. A probe bounds the offset between the store's clock and this
host's boot clock: the stamp was made between the start and the end of the
write, and a stamp with no fraction of a second (S3 truncates to the second)
may be up to a second late. Each probe narrows the bounds, and the estimate
moves only when a probe proves it wrong, so one process's consecutive stamps
are as steady as its boot clock. That is good to about a second: plenty for
leases of minutes and liveness of tens of seconds, and never used to *order*
rows, which is done by sequence numbers, versions and commit order.

A process the home refuses writes to (a read-only mount, read-only keys)
cannot probe: it reads times by its own wall clock instead (``borrowed``).
It cannot write a lease, a beat or a claim either, so nothing another host
relies on is ever decided on it; it only shows ages (``lock show``).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from pipelines.storage.location import Location
from pipelines.storage.objects import ObjectStore, store_for

REPROBE_S = 60.0
"""A process probes the store again after this long (boot clock), so a drift between the clocks cannot build up."""
DRIFT = 1e-4
"""How far two clocks may drift apart per second (100 ppm, ten times a plain quartz clock's): old bounds widen so."""
FINE = 0.02
"""How late a stamp with a fraction of a second may be: a file system stamps with the kernel's coarse clock."""
PROBES = "_pipelines/clock"
"""Where probe objects are written (and removed at once), under the home's root."""

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boot_clock() -> float:
    """Seconds on this host's boot clock: counts a suspended machine's sleep too, never set, never jumps."""
    return time.clock_gettime(_BOOTTIME)


Probe = Callable[[], tuple[float, float, float]]
"""One reading of the store's time: ``(boot clock before, the store's stamp, boot clock after)``."""


class OffsetEstimate:
    """The store's clock minus this host's boot clock, from probes: bounds, and an estimate inside them.

    Pure bookkeeping, so it can be tested with any sequence of probes.
    """

    def __init__(self) -> None:
        self.low = -math.inf
        self.high = math.inf
        self.offset: float | None = None
        self._at = 0.0  # boot clock of the last probe: old bounds widen by DRIFT from there

    def add(self, before: float, stamp: float, after: float, resolution: float | None = None) -> None:
        # A stamp with no fraction comes from a store that truncates to the second (S3); a file system's stamp
        # comes from the kernel's coarse clock, up to a tick (a few ms) behind. ``resolution`` 0: an exact reading.
        if resolution is None:
            resolution = FINE if stamp % 1 else 1.0
        low, high = stamp - after, stamp + resolution - before
        if self.offset is not None:
            widen = DRIFT * max(0.0, after - self._at)
            old_low, old_high = self.low - widen, self.high + widen
            if low <= old_high and old_low <= high:  # consistent: narrow the bounds, move the estimate only if out
                low, high = max(low, old_low), min(high, old_high)
                self.low, self.high, self._at = low, high, after
                self.offset = min(max(self.offset, low), high)
                return
        self.low, self.high, self._at = low, high, after  # the first probe, or the clocks jumped: start again
        self.offset = (low + high) / 2


class StoreClock:
    """The store's time, read by probing it now and then; thread-safe, one per store and home in a process."""

    def __init__(self, probe: Probe, *, reprobe_s: float = REPROBE_S, boot: Callable[[], float] = boot_clock) -> None:
        self._probe = probe
        self._boot = boot
        self.reprobe_s = reprobe_s
        self._estimate = OffsetEstimate()
        self._probed_at = -math.inf
        self._last = -math.inf
        self._lock = threading.Lock()
        self.borrowed = False  # True: the store refused the probe; times are this host's wall clock

    def now_s(self) -> float:
        """Seconds since the epoch by the store's clock; strictly increasing within this process."""
        with self._lock:
            if self._estimate.offset is None or self._boot() - self._probed_at >= self.reprobe_s:
                resolution = None
                try:
                    before, stamp, after = self._probe()
                except PermissionError:  # this host's wall clock, read between two boot-clock readings: exact
                    before, stamp, after = self._boot(), time.time(), self._boot()
                    resolution, self.borrowed = 0.0, True
                self._estimate.add(before, stamp, after, resolution)
                self._probed_at = after
            assert self._estimate.offset is not None
            now = self._boot() + self._estimate.offset
            if now <= self._last:
                now = self._last + 1e-6
            self._last = now
            return now

    def now(self) -> datetime:
        """The store's time as an aware UTC datetime (microseconds, like the control tables' timestamps)."""
        return datetime.fromtimestamp(self.now_s(), UTC)


def probe_store(store: ObjectStore, folder: Location, boot: Callable[[], float] = boot_clock) -> Probe:
    """A probe that writes an empty object under ``folder``, reads the store's stamp on it and removes it."""

    def probe() -> tuple[float, float, float]:
        where = folder / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        before = boot()
        try:
            store.write(where, b"")
        except Exception as e:
            if _refused(e):
                raise PermissionError(f"{where}: the store refused the clock's probe ({e})") from e
            raise
        after = boot()
        try:
            stamp = store.modified(where)
        finally:
            with contextlib.suppress(Exception):
                store.delete(where)
        return before, stamp, after

    return probe


def _refused(error: BaseException) -> bool:
    """A write the store refuses for good (permissions, a read-only file system or keys), not a failure to reach it."""
    if isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return True
    response = getattr(error, "response", None)  # botocore's ClientError
    return isinstance(response, dict) and response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 403


_CLOCKS: dict[str, StoreClock] = {}
_CLOCKS_LOCK = threading.Lock()


def store_clock(root: Location) -> StoreClock:
    """The clock of the store holding the home at ``root``; one per home in a process (probes are shared)."""
    key = str(root)
    with _CLOCKS_LOCK:
        clock = _CLOCKS.get(key)
        if clock is None:
            clock = StoreClock(probe_store(store_for(root), root / PROBES))
            _CLOCKS[key] = clock
        return clock
