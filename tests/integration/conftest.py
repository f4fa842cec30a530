"""Fixtures for the integration suite: ``spark`` (one local session), ``home``, ``spark_standalone``."""

from tests.integration.spark_fixtures import home, spark, spark_standalone  # noqa: F401
