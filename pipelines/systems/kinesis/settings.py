"""The job YAML's ``systems: kinesis:`` section, validated.

Each setting's meaning is in ``_DESCRIPTIONS``; an unknown key is refused
with the closest match. Credentials never come from the YAML (``client``
resolves them): keys that look like credentials are refused with the reason.
See docs/systems/kinesis.md, "Settings and credentials".
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import urlparse

from pipelines.errors import ConfigError

_SECRET_WORDS = ("secret", "password", "access_key", "session_token", "credential", "token")
ON_TRIMMED = ("fail", "skip")


@dataclass(frozen=True)
class KinesisSettings:
    region: str | None = None
    endpoint_url: str | None = None
    profile: str | None = None
    aws_conn_id: str | None = None
    verify_tls: bool = True
    max_attempts: int = 8
    backoff_base_s: float = 0.1
    backoff_cap_s: float = 5.0
    get_records_per_second: float = 5.0
    read_bytes_per_second: int = 2_000_000
    get_records_limit: int = 10_000
    read_wait_s: float = 2.0
    replay_timeout_s: float = 120.0
    read_timeout_s: float = 30.0
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    on_trimmed: str = "fail"

    def to_dict(self) -> dict[str, Any]:
        """Only what differs from the defaults: what a job YAML would say."""
        defaults = KinesisSettings()
        return {k: v for k, v in asdict(self).items() if v != getattr(defaults, k)}

    def client_key(self) -> tuple[Any, ...]:
        """What makes two clients different (the rate and retry settings do not)."""
        return (
            self.region,
            self.endpoint_url,
            self.profile,
            self.aws_conn_id,
            self.verify_tls,
            self.connect_timeout_s,
            self.request_timeout_s,
        )

    def is_local_emulator(self) -> bool:
        if not self.endpoint_url:
            return False
        host = urlparse(self.endpoint_url).hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


_DESCRIPTIONS = {
    "region": "AWS region, e.g. eu-west-1 (else the standard chain's)",
    "endpoint_url": "an emulator's or VPC endpoint's URL",
    "profile": "a named profile of the standard AWS chain",
    "aws_conn_id": "an Airflow connection holding the credentials",
    "verify_tls": "verify the endpoint's TLS certificate",
    "max_attempts": "attempts per call on throttling and transient errors",
    "backoff_base_s": "first back-off (full jitter, doubling)",
    "backoff_cap_s": "longest back-off",
    "get_records_per_second": "GetRecords calls per shard and second, per process",
    "read_bytes_per_second": "bytes read per shard and second, per process",
    "get_records_limit": "records per GetRecords call (Kinesis allows 10000)",
    "read_wait_s": "how long one read waits on a shard that is behind but returns empty pages",
    "replay_timeout_s": "how long a replayed micro-batch may take to reach its pinned end",
    "read_timeout_s": "how long one read waits out an endpoint that does not answer before its task fails",
    "connect_timeout_s": "TCP connect timeout",
    "request_timeout_s": "socket read timeout",
    "on_trimmed": "fail (default) or skip when unread records were trimmed by retention",
}


def validate_settings(raw: Mapping[str, Any] | None, origin: str = "systems.kinesis") -> KinesisSettings:
    """The settings a job YAML gives, checked; ``origin`` names where they came from in error messages."""
    if raw is None:
        return KinesisSettings()
    if isinstance(raw, KinesisSettings):
        return raw
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{origin} must be a mapping of settings, got {type(raw).__name__}")
    known = {f.name: f for f in fields(KinesisSettings)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"{origin}: setting names are strings, got {key!r}")
        if key not in known:
            lowered = key.lower()
            if any(word in lowered for word in _SECRET_WORDS):
                raise ConfigError(
                    f"{origin}.{key}: credentials never go in the job YAML; use the standard AWS chain "
                    "(environment, profile, instance or container role), 'profile', or 'aws_conn_id' "
                    "(an Airflow connection)"
                )
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{origin}: unknown setting {key!r}{hint} Known: {', '.join(sorted(known))}")
        values[key] = _check(origin, key, value, KinesisSettings.__dataclass_fields__[key].default)
    settings = KinesisSettings(**values)
    if settings.on_trimmed not in ON_TRIMMED:
        raise ConfigError(f"{origin}.on_trimmed must be one of {', '.join(ON_TRIMMED)}, got {settings.on_trimmed!r}")
    if settings.endpoint_url is not None and urlparse(settings.endpoint_url).scheme not in ("http", "https"):
        raise ConfigError(f"{origin}.endpoint_url must be an http(s) URL, got {settings.endpoint_url!r}")
    if settings.profile and settings.aws_conn_id:
        raise ConfigError(f"{origin}: give either 'profile' or 'aws_conn_id', not both")
    return settings


def _check(origin: str, key: str, value: Any, default: Any) -> Any:
    where = f"{origin}.{key}"
    if default is None or isinstance(default, str):
        if value is None and default is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where} must be a non-empty string ({_DESCRIPTIONS[key]}), got {value!r}")
        return value.strip()
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where} must be a whole number >= 1 ({_DESCRIPTIONS[key]}), got {value!r}")
        if key == "get_records_limit" and value > 10_000:
            raise ConfigError(f"{where} must be at most 10000 (Kinesis' limit per GetRecords call), got {value}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where} must be a number > 0 ({_DESCRIPTIONS[key]}), got {value!r}")
    return float(value)
