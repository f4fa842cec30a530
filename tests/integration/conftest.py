"""Integration fixtures: ``spark`` (one local session), ``home``, ``spark_standalone``, ``kafka_broker``,
``s3_server``."""

from tests.integration.kafka_fixtures import kafka_broker  # noqa: F401
from tests.integration.s3_fixtures import s3_server  # noqa: F401
from tests.integration.spark_fixtures import home, spark, spark_standalone  # noqa: F401
