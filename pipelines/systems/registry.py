"""Which module serves which input system (the systems' names are ``core.ssp.SYSTEMS``, checked without these modules).

A system is opened with the settings of the job's ``systems:`` section for it
(``pipelines.jobs.config``), e.g. Kafka's bootstrap servers and client
properties; secrets are resolved by the system module itself (environment
or an Airflow connection), never carried in the job YAML.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipelines.core.checkpoints import partition_floor
from pipelines.core.ssp import SystemStreamPartition, validate_system
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem, Position


def open_system(system: str, home: Home, settings: Mapping[str, Any] | None = None) -> InputSystem:
    """A ready client of ``system``: admin, consumer and producer behind ``InputSystem``."""
    validate_system(system)
    if system == "deltalog":
        from pipelines.systems.deltalog import DeltaLog, validate_settings

        return DeltaLog(home.streams, **validate_settings(settings or {}))
    if system == "kafka":
        from pipelines.systems.kafka import KafkaSystem

        return KafkaSystem(settings or {}, home)
    if system == "kinesis":
        from pipelines.systems.kinesis import KinesisSystem

        return KinesisSystem(settings or {}, home)
    raise AssertionError(f"input system {system} is in SYSTEMS but this function does not open it")


def position_order(system: str) -> Callable[[Position], Any]:
    """A system's order of positions without opening a client: its module's ``position_key``."""
    module = importlib.import_module(f"pipelines.systems.{validate_system(system)}")
    order: Callable[[Position], Any] = module.position_key
    return order


class JobSystems:
    """The input systems of one job, each opened once with the job's settings for it.

    Everything above ``systems/`` that needs positions answered (floors of key
    buckets, how far a partition is, what a record is) asks through here, so
    each stream's positions are ordered by its own system.
    """

    def __init__(self, home: Home, settings: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.home = home
        self.settings = dict(settings or {})
        self._open: dict[str, InputSystem] = {}

    def of(self, system: str) -> InputSystem:
        if system not in self._open:
            self._open[system] = open_system(system, self.home, self.settings.get(system))
        return self._open[system]

    def floors(
        self, offsets: Iterable[tuple[SystemStreamPartition, Position]]
    ) -> dict[SystemStreamPartition, Position]:
        """Per whole partition, the position of its slowest key bucket, in its own system's order."""
        by_system: dict[str, list[tuple[SystemStreamPartition, Position]]] = {}
        for ssp, position in offsets:
            by_system.setdefault(ssp.system, []).append((ssp, position))
        result: dict[SystemStreamPartition, Position] = {}
        for system, items in by_system.items():
            result.update(partition_floor(items, self.of(system).position_key))
        return result

    def close(self) -> None:
        for system in self._open.values():
            system.close()
        self._open.clear()

    def __enter__(self) -> JobSystems:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
