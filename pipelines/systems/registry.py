"""Which module serves which input system: the one place that names them all.

A system is opened with the settings of the job's ``systems:`` section for it
(``pipelines.jobs.config``), e.g. Kafka's bootstrap servers and client
properties; secrets are resolved by the system module itself (environment
or an Airflow connection), never carried in the job YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.control.home import Home
from pipelines.errors import ConfigError
from pipelines.systems.base import InputSystem

SYSTEMS = ("deltalog", "kafka", "kinesis")


def open_system(system: str, home: Home, settings: Mapping[str, Any] | None = None) -> InputSystem:
    """A ready client of ``system``: admin, consumer and producer behind ``InputSystem``."""
    if system == "deltalog":
        from pipelines.systems.deltalog import DeltaLog

        return DeltaLog(home.streams)
    if system == "kafka":
        from pipelines.systems.kafka import KafkaSystem

        return KafkaSystem(settings or {})
    if system == "kinesis":
        from pipelines.systems.kinesis import KinesisSystem

        return KinesisSystem(settings or {}, home)
    raise ConfigError(f"unknown input system {system!r}; choose one of {', '.join(SYSTEMS)}")
