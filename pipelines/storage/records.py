"""Coordination records: facts that several processes, on any hosts, agree on through the home alone.

Each is built on the store's ``create`` (exactly one of racing writers wins),
so it needs no lock service and no shared file system (docs/storage.md):

* ``VersionedRecord`` — a small JSON document that changes by creating its
  next version (``0000000001.json``, ``0000000002.json``, ...): a writer reads
  the latest, computes the next and creates it; losing the race means someone
  else changed it first, so it reads again. Readers take the highest version.
  Old versions are kept: these documents change a handful of times in their life.
* ``Lease`` — a holder named by the generation it created (``claim.<g>``)
  that proves it lives by beating (``claim.<g>.beat``, rewritten with a
  counter). Another process judges it dead only when the beat has not
  changed for the lease's length *on its own monotonic clock*, and then takes
  over by creating generation ``g + 1``; no wall clock and no pid of another
  host is ever compared.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.backoff import Backoff
from pipelines.storage.location import Location
from pipelines.storage.objects import ObjectStore

_VERSION = re.compile(r"(\d{10})\.json")
_LOST_RACE = Backoff(base_s=0.01, cap_s=0.5)
"""Between tries of a record's update that another writer's version beat (contention: full jitter)."""
RELEASED = b"released"


class VersionedRecord:
    """A JSON object under ``folder`` that changes only by compare-and-create of its next version."""

    def __init__(self, store: ObjectStore, folder: Location) -> None:
        self.store = store
        self.folder = folder

    def latest(self) -> tuple[int, dict[str, Any]]:
        """``(version, document)``; ``(0, {})`` when nothing was ever written."""
        versions = sorted(
            int(m.group(1)) for e in self.store.list(self.folder) if (m := _VERSION.fullmatch(e.name)) is not None
        )
        for version in reversed(versions):
            try:
                return version, json.loads(self.store.read(self._at(version)))
            except FileNotFoundError:  # removed by hand between the listing and the read
                continue
        return 0, {}

    def update(self, change: Callable[[dict[str, Any]], dict[str, Any] | None], attempts: int = 50) -> dict[str, Any]:
        """Apply ``change`` to the latest document (it returns the new one, or None for no change); the result."""
        for _ in _LOST_RACE.attempts(attempts):
            version, document = self.latest()
            changed = change(json.loads(json.dumps(document)))
            if changed is None or changed == document:
                return document
            if self.store.create(self._at(version + 1), json.dumps(changed, sort_keys=True, indent=1).encode()):
                return changed
            # another writer changed it first: read theirs and decide again
        raise TimeoutError(f"{self.folder}: {attempts} writers in a row changed the record first; gave up")

    def _at(self, version: int) -> Location:
        return self.folder / f"{version:010d}.json"


def holder_name() -> str:
    """Who holds a lease: host, pid and a random tag (printed to people; never used to signal anything)."""
    return f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex[:12]}"


@dataclass
class Lease:
    """One generation of a lease under ``prefix``; ``beat()`` while holding, ``stop()`` when done."""

    store: ObjectStore
    prefix: Location  # the lease's objects are <prefix>.<g> and <prefix>.<g>.beat
    generation: int
    holder: str
    beats: int = 0
    _thread: threading.Thread | None = field(default=None, repr=False)
    _halt: threading.Event = field(default_factory=threading.Event, repr=False)

    def beat(self) -> None:
        self.beats += 1
        self.store.write(_beat(self.prefix, self.generation), f"{self.holder} {self.beats}".encode())

    def keep_alive(self, every_s: float) -> Lease:
        """Beat from a thread of its own until ``stop``: a long task must not look dead while it works."""

        def run() -> None:
            while not self._halt.wait(every_s):
                with contextlib.suppress(Exception):  # a missed beat costs a takeover at worst, never the task
                    self.beat()

        self._thread = threading.Thread(target=run, name=f"lease-{self.prefix.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()

    def release(self) -> None:
        """Give up the lease now (the work failed): a waiter may take over at once instead of after the lease."""
        self.stop()
        with contextlib.suppress(Exception):
            self.store.write(_beat(self.prefix, self.generation), RELEASED)


def take(store: ObjectStore, prefix: Location, *, start: int = 0) -> Lease | None:
    """Hold the lease by creating generation ``start`` (or a later one, if newer generations exist and the newest
    is free); None when the newest generation is held by someone else."""
    generation = start
    holder = holder_name()
    while True:
        if store.create(_generation(prefix, generation), holder.encode()):
            return Lease(store, prefix, generation, holder)
        if not store.exists(_generation(prefix, generation + 1)):
            return None  # generation g is held (alive or not: the caller's watch decides)
        generation += 1


class Watch:
    """A waiter's view of someone else's lease: dead once its beat stood still for ``lease_s`` of our time."""

    def __init__(self, store: ObjectStore, prefix: Location, lease_s: float) -> None:
        self.store = store
        self.prefix = prefix
        self.lease_s = lease_s
        self._seen: tuple[int, bytes | None] | None = None
        self._since = time.monotonic()

    def current(self, known: int = -1) -> int:
        """The newest generation that exists (-1: none), looking from ``known`` (one that exists) on."""
        generation = known
        while self.store.exists(_generation(self.prefix, generation + 1)):
            generation += 1
        return generation

    def expired(self, generation: int) -> bool:
        try:
            beat: bytes | None = self.store.read(_beat(self.prefix, generation))
        except FileNotFoundError:
            beat = None
        if beat == RELEASED:
            return True
        now = time.monotonic()
        if self._seen != (generation, beat):
            self._seen, self._since = (generation, beat), now
            return False
        return now - self._since >= self.lease_s

    def take_over(self, generation: int) -> Lease | None:
        """Create generation ``generation + 1``: exactly one of several waiters that judged it dead wins."""
        return take(self.store, self.prefix, start=generation + 1)


def _generation(prefix: Location, generation: int) -> Location:
    return prefix.parent / f"{prefix.name}.{generation}"


def _beat(prefix: Location, generation: int) -> Location:
    return prefix.parent / f"{prefix.name}.{generation}.beat"
