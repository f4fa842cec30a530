"""The embedded input system: a partitioned, append-only Delta table per stream, one module per role.

=============  ==============================================================
``system``     ``DeltaLog``: the ``InputSystem`` the registry opens, and the
               ``systems: deltalog:`` section as its keywords
``layout``     the table's schema and metadata, file names, offsets (positions)
``snapshot``   one table version indexed by partition and first offset
``tables``     the streams under one root: snapshots, commits, outages
``admin``      creating and growing streams, ends, batch plans
``producer``   appends with Kafka's partitioner and dense offsets
``reader``     offset ranges of a partition, planned from statistics
=============  ==============================================================

The section's pydantic model is ``pipelines.systems.deltalog_settings``, apart
so that checking a job's configuration loads no ``deltalake``. See
docs/systems/deltalog.md.
"""

from pipelines.systems.deltalog.layout import position_key
from pipelines.systems.deltalog.system import DeltaLog, validate_settings

__all__ = ["DeltaLog", "position_key", "validate_settings"]
