"""Hosts whose clocks disagree, inside one test process.

A ``SkewedHost`` has what a machine of its own would have: a wall clock off by
``wall_offset_s`` (every ``utc_now`` of the ``pipelines`` modules, while its
``wall()`` context is entered) and a boot clock of its own, through which it
reads the store's clock by its own probes (``storage.clock``). Writers built
with ``host.control()`` / ``host.lock()`` / ``host.registration()`` write as
that host would.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from pipelines.control import ControlPlane
from pipelines.control import table as control_table
from pipelines.control.drivers import Registration
from pipelines.control.locks import ScalingLock
from pipelines.storage.clock import PROBES, StoreClock, boot_clock, probe_store
from pipelines.storage.home import Home


@dataclass
class SkewedHost:
    home: Home
    wall_offset_s: float
    boot_offset_s: float = 0.0
    clock: StoreClock = field(init=False)

    def __post_init__(self) -> None:
        def boot() -> float:
            return boot_clock() + self.boot_offset_s

        self.clock = StoreClock(probe_store(self.home.store, self.home.root / PROBES, boot), boot=boot)

    def wall_now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.wall_offset_s)

    @contextmanager
    def wall(self) -> Iterator[None]:
        """This host's wall clock for every ``utc_now`` of the ``pipelines`` modules, while entered."""
        with pytest.MonkeyPatch.context() as patch:
            for name, module in list(sys.modules.items()):
                if name.startswith("pipelines") and getattr(module, "utc_now", None) is control_table.utc_now:
                    patch.setattr(module, "utc_now", self.wall_now)
            yield

    def control(self) -> ControlPlane:
        return ControlPlane(self.home, self.clock)

    def lock(self) -> ScalingLock:
        return ScalingLock(self.home, self.clock)

    def registration(self, job: str) -> Registration:
        return Registration(self.home, job, clock=self.clock)
