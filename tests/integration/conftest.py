"""Integration fixtures: ``spark`` (one local session), ``home``, ``spark_standalone``, ``kafka_broker``."""

from tests.integration.kafka_fixtures import kafka_broker  # noqa: F401
from tests.integration.spark_fixtures import home, spark, spark_standalone  # noqa: F401
