"""Amazon Kinesis Data Streams as an input system, one module per role (docs/systems/kinesis.md).

=============  ==============================================================
``system``     ``KinesisSystem``: the ``InputSystem`` the registry opens
``settings``   the ``systems: kinesis:`` section of a job YAML
``client``     boto3 client per process, retried calls, per-shard limits,
               credentials
``admin``      shard listings, slot layouts, batch plans, resharding, lineage
``reader``     a slot's records from its checkpoint (executors)
``audit``      what the readers read, for the data-quality checks
``producer``   PutRecords (tests, demos, benchmarks)
``positions``  slot, record and time positions and their order (pure)
=============  ==============================================================

The pure shard-to-slot mapper is ``pipelines.core.shards``.
"""

from pipelines.systems.kinesis.positions import position_key
from pipelines.systems.kinesis.settings import KinesisSettings, validate_settings
from pipelines.systems.kinesis.system import KinesisSystem

__all__ = ["KinesisSettings", "KinesisSystem", "position_key", "validate_settings"]
