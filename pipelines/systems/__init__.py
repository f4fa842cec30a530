"""Input systems: where a job's records come from, behind one protocol (``base.InputSystem``).

``base`` holds the protocol and the system-neutral metadata types; ``deltalog``
is the embedded, serverless input (a partitioned append-only Delta table per
stream); ``registry.open_system`` is the one place that knows which module
serves which system name. Only this package knows which system it talks to:
everything above it holds an ``InputSystem`` and treats positions as opaque.
``deltalog`` is not imported here so that planning code can use the types
without loading ``deltalake``.
"""

from pipelines.systems.base import (
    Bounded,
    Expansion,
    InputSystem,
    PartitionMetadata,
    Position,
    ReadResult,
    StreamMetadata,
)

__all__ = [
    "Bounded",
    "Expansion",
    "InputSystem",
    "PartitionMetadata",
    "Position",
    "ReadResult",
    "StreamMetadata",
]
