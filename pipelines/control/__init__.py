"""The control plane: a deployment's durable state (job models, checkpoints, events, metrics) in Delta tables.

Everything lives under one home directory (`Home`); the tables are written
with the `deltalake` package, so the driver, the executors and Airflow tasks
share them without Spark. `ControlPlane` and `ScalingEvent` are imported on
first use, so code that only needs paths (`Home`, `resolve_home`) does not pay
for pyarrow and deltalake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.control.home import Home, resolve_home

if TYPE_CHECKING:
    from pipelines.control.tables import ControlPlane, ScalingEvent

__all__ = ["ControlPlane", "Home", "ScalingEvent", "resolve_home"]


def __getattr__(name: str) -> Any:
    if name in ("ControlPlane", "ScalingEvent"):
        from pipelines.control import tables

        return getattr(tables, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
