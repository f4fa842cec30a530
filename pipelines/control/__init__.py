"""The control plane: a deployment's durable state in Delta tables, one module per table.

Everything lives under one home directory (``home.Home``); the tables are
written with the ``deltalake`` package over one primitive
(``table.ControlTable``), so the driver, the executors and Airflow tasks
share them without Spark. ``ControlPlane`` bundles one object per table for
callers that use several; its parts are imported on first use, so code that
only needs paths (``Home``, ``resolve_home``) does not pay for pyarrow and
deltalake.

=================  ====================================================
module             table
=================  ====================================================
``job_models``     versions of job models and which one is in force
``checkpoints``    next position per model version, SSP and key bucket
``scaling_events`` rescales and partition changes, per status change
``metrics``        per-batch, per-task and lifecycle values
``dq_results``     data-quality verdicts per window
``locks``          the scaling lock (one operation per job at a time)
``decisions``      the autosizer's decisions and what they saw
``drivers``        job drivers: host, pid, Spark application, heartbeats, stops
=================  ====================================================
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from pipelines.storage.home import Home, resolve_home

if TYPE_CHECKING:
    from pipelines.control.checkpoints import Checkpoints
    from pipelines.control.dq_results import DqResults
    from pipelines.control.drivers import Drivers
    from pipelines.control.job_models import JobModels
    from pipelines.control.metrics import Metrics
    from pipelines.control.scaling_events import ScalingEvents
    from pipelines.storage.clock import StoreClock

__all__ = ["ControlPlane", "Home", "resolve_home"]


class ControlPlane:
    """One handle per control table of a home; cheap, holds no lock, not shared between threads.

    Each part keeps its DeltaTable and refreshes it before each read, so it
    sees other processes' commits.
    """

    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self.home = home
        self._clock = clock  # None: the home's (``storage.clock.store_clock``); another: a test's host of its own

    @cached_property
    def job_models(self) -> JobModels:
        from pipelines.control.job_models import JobModels

        return JobModels(self.home, self._clock)

    @cached_property
    def checkpoints(self) -> Checkpoints:
        from pipelines.control.checkpoints import Checkpoints

        return Checkpoints(self.home, self._clock)

    @cached_property
    def events(self) -> ScalingEvents:
        from pipelines.control.scaling_events import ScalingEvents

        return ScalingEvents(self.home, self._clock)

    @cached_property
    def metrics(self) -> Metrics:
        from pipelines.control.metrics import Metrics

        return Metrics(self.home, self._clock)

    @cached_property
    def dq_results(self) -> DqResults:
        from pipelines.control.dq_results import DqResults

        return DqResults(self.home, self._clock)

    @property
    def clock(self) -> StoreClock:
        """The store's clock (``storage.clock``): what durations judged across hosts are measured on."""
        from pipelines.storage.clock import store_clock

        return self._clock or store_clock(self.home.root)

    @cached_property
    def drivers(self) -> Drivers:
        from pipelines.control.drivers import Drivers

        return Drivers(self.home, self._clock)
