"""Which input system serves a stream: one place to add Kafka and Kinesis consumers."""

from __future__ import annotations

from typing import Any

from pipelines.control.home import Home
from pipelines.errors import ConfigError


def open_system(system: str, home: Home) -> Any:
    """The admin + consumer of an input system (today the embedded Delta log)."""
    if system == "deltalog":
        from pipelines.systems.deltalog import DeltaLog

        return DeltaLog(home.streams)
    raise ConfigError(f"input system {system!r} has no consumer in this version; use 'deltalog'")
