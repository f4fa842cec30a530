"""Integration fixtures: ``home``, ``kafka_broker`` (``spark`` and ``s3_server``, used by the
e2e tests too, are the root conftest's)."""

from tests.integration.kafka_fixtures import kafka_broker  # noqa: F401
from tests.integration.spark_fixtures import home  # noqa: F401
