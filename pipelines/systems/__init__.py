"""Input systems: where a job's records come from, behind one small admin interface.

``base`` holds the system-neutral metadata types the job model and the
checkpoint migration use; ``deltalog`` is the embedded, serverless input (a
partitioned append-only Delta table per stream). Kafka and Kinesis adapters
implement the same ``SystemAdmin`` protocol. ``deltalog`` is not imported here
so that planning code can use the types without loading ``deltalake``.
"""

from pipelines.systems.base import Expansion, PartitionMetadata, StreamMetadata, SystemAdmin

__all__ = ["Expansion", "PartitionMetadata", "StreamMetadata", "SystemAdmin"]
