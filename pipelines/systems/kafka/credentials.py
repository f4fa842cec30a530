"""Where a Kafka client's secrets come from: environment variables and an Airflow connection, never the YAML.

Resolved in the process that connects (the driver, each Spark executor), so
no secret travels in a pickled system or shows in a job's configuration.
The Airflow connection is of the Kafka provider's type (its extra is the
client configuration); ``AIRFLOW_CONN_<ID>`` in JSON form is read directly,
so executors resolve it without Airflow installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pipelines.errors import ConfigError
from pipelines.systems.kafka.settings import OWNED, KafkaSettings


def secret_properties(settings: KafkaSettings) -> dict[str, str]:
    """The client properties of the connection, then of ``secrets_env`` (which win), read now from this process."""
    conf = connection_properties(settings.connection_id)
    for prop, env in settings.secrets_env.items():
        value = os.environ.get(env)
        if value is None:
            raise ConfigError(f"systems.kafka.secrets_env.{prop}: environment variable {env} is not set")
        conf[prop] = value
    return conf


def connection_properties(connection_id: str | None) -> dict[str, str]:
    """Client properties (with secrets) from an Airflow connection of the Kafka provider's type.

    The provider keeps the client configuration as a JSON object in the
    connection's extra. ``AIRFLOW_CONN_<ID>`` in JSON form is read directly,
    so Spark executors resolve it without Airflow installed.
    """
    if connection_id is None:
        return {}
    raw = os.environ.get(f"AIRFLOW_CONN_{connection_id.upper()}")
    extra: Any = None
    if raw is not None and raw.lstrip().startswith("{"):
        try:
            extra = json.loads(raw).get("extra")
        except (ValueError, AttributeError):
            raise ConfigError(f"AIRFLOW_CONN_{connection_id.upper()} is not a JSON connection") from None
        if isinstance(extra, str):
            extra = json.loads(extra or "{}")
    else:
        try:
            from airflow.sdk import BaseHook
        except ImportError:
            raise ConfigError(
                f"systems.kafka.connection_id {connection_id!r}: Airflow is not installed here and "
                f"AIRFLOW_CONN_{connection_id.upper()} is not set in JSON form"
            ) from None
        extra = BaseHook.get_connection(connection_id).extra_dejson
    if not isinstance(extra, Mapping):
        raise ConfigError(f"Airflow connection {connection_id!r}: its extra must be a JSON object of client properties")
    return {str(k): str(v) for k, v in extra.items() if k not in OWNED}
