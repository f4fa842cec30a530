"""Kafka as an input system, one module per role (docs/systems/kafka.md).

===============  ============================================================
``system``       ``KafkaSystem``: the ``InputSystem`` the registry opens
``settings``     the ``systems: kafka:`` section of a job YAML
``credentials``  secrets from environment variables or an Airflow connection
``client``       the process's clients (admin, consumers, producer) and what
                 their errors mean
``admin``        metadata, last stable offsets, batch plans, topic growth
``expansions``   the expansion points this platform observed (Kafka has none)
``reader``       a partition's records from a position (executors)
``progress``     the job's progress mirrored to its consumer group
``producer``     idempotent appends (tests, demos, benchmarks)
``positions``    decimal offsets and their order (pure)
===============  ============================================================
"""

from pipelines.systems.kafka.positions import position_key
from pipelines.systems.kafka.settings import KafkaSettings, validate_settings
from pipelines.systems.kafka.system import KafkaSystem

__all__ = ["KafkaSettings", "KafkaSystem", "position_key", "validate_settings"]
