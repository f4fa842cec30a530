"""The job YAML's ``systems: kafka:`` section, checked before anything connects.

Every mistake names its field and a misspelled one is refused. Secrets never
come from the YAML: a client property that looks like one is refused with
where to put it instead (``secrets_env`` or an Airflow connection, resolved by
``credentials`` in the process that connects). Properties the contract
depends on are set by the platform and may not be overridden. See
docs/systems/kafka.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines.errors import ConfigError, refuse_unknown
from pipelines.systems.kafka.expansions import DEFAULT_GRACE_MS

FIELDS = (
    "bootstrap_servers",
    "properties",
    "secrets_env",
    "connection_id",
    "timeout_ms",
    "read_timeout_ms",
    "consumer_group",
    "commit_progress",
    "expansion_grace_ms",
)
_SECRET_MARKERS = ("password", "secret", "key.pem", "sasl.oauthbearer.config", "sasl.jaas")
OWNED = (
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "isolation.level",
    "enable.partition.eof",
    "partitioner",
    "transactional.id",
)
"""Client properties this system sets itself: the contract depends on them, so a job may not override them."""


@dataclass(frozen=True)
class KafkaSettings:
    """The validated ``systems.kafka`` section (secrets not resolved yet: that happens in the process that connects)."""

    bootstrap_servers: str
    properties: Mapping[str, str] = field(default_factory=dict)
    secrets_env: Mapping[str, str] = field(default_factory=dict)
    connection_id: str | None = None
    timeout_ms: int = 10_000
    read_timeout_ms: int = 30_000
    consumer_group: str | None = None
    commit_progress: bool = True
    expansion_grace_ms: int = DEFAULT_GRACE_MS  # expansions: how long producers may take to switch


def validate_settings(settings: Mapping[str, Any], where: str = "systems.kafka") -> KafkaSettings:
    """Check a ``systems.kafka`` section; every mistake names its field, a misspelled one is refused."""
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{where} must be a mapping of settings")
    refuse_unknown(where, settings, FIELDS)
    servers = settings.get("bootstrap_servers")
    if isinstance(servers, list | tuple) and servers and all(isinstance(s, str) and s for s in servers):
        servers = ",".join(servers)
    if not isinstance(servers, str) or not servers.strip():
        raise ConfigError(f"{where}.bootstrap_servers: give the brokers as 'host:port,host:port' or a list")
    properties = settings.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise ConfigError(f"{where}.properties must be a mapping of librdkafka client properties")
    clean: dict[str, str] = {}
    for name, value in properties.items():
        if not isinstance(name, str) or isinstance(value, Mapping | list | tuple) or value is None:
            raise ConfigError(f"{where}.properties.{name}: a client property needs a scalar value, got {value!r}")
        if name in OWNED:
            raise ConfigError(f"{where}.properties.{name} is set by the platform (reads depend on it); remove it")
        if _looks_secret(name):
            raise ConfigError(
                f"{where}.properties.{name} looks like a secret: never put it in the job YAML; name an "
                f"environment variable in {where}.secrets_env ({name}: MY_ENV_VAR) or an Airflow "
                f"connection in {where}.connection_id"
            )
        clean[name] = str(value).lower() if isinstance(value, bool) else str(value)
    secrets_env = settings.get("secrets_env") or {}
    if not isinstance(secrets_env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in secrets_env.items()
    ):
        raise ConfigError(f"{where}.secrets_env must map client properties to environment variable names")
    connection_id = settings.get("connection_id")
    if connection_id is not None and (not isinstance(connection_id, str) or not connection_id):
        raise ConfigError(f"{where}.connection_id must be the id of an Airflow connection")
    timeouts = {}
    for name, default in (("timeout_ms", 10_000), ("read_timeout_ms", 30_000)):
        value = settings.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}.{name} must be a whole number of milliseconds >= 1, got {value!r}")
        timeouts[name] = value
    group = settings.get("consumer_group")
    if group is not None and (not isinstance(group, str) or not group):
        raise ConfigError(f"{where}.consumer_group must be a group name (default: the job's name)")
    commit = settings.get("commit_progress", True)
    if not isinstance(commit, bool):
        raise ConfigError(f"{where}.commit_progress must be true or false")
    grace = settings.get("expansion_grace_ms", DEFAULT_GRACE_MS)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise ConfigError(
            f"{where}.expansion_grace_ms must be a whole number of milliseconds >= 0 (at least the producers' "
            f"metadata.max.age.ms), got {grace!r}"
        )
    return KafkaSettings(
        bootstrap_servers=servers.strip(),
        properties=clean,
        secrets_env=dict(secrets_env),
        connection_id=connection_id,
        consumer_group=group,
        commit_progress=commit,
        expansion_grace_ms=grace,
        **timeouts,
    )


def _looks_secret(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)
