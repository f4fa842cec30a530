"""The job YAML's ``systems: kinesis:`` section, validated, and the AWS session it resolves to.

Each setting's meaning is in ``_DESCRIPTIONS``; an unknown key is refused
with the closest match. Credentials never come from the YAML: the standard
AWS chain, a named ``profile``, or an Airflow connection (``aws_conn_id``),
and dummy ones only for an emulator on the loopback interface. See
docs/systems/kinesis.md, "Settings and credentials".
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

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


# ------------------------------------------------------------------ credentials


def session(settings: KinesisSettings) -> Any:
    """A boto3 session with the credentials the settings point to; nothing secret is logged or pickled."""
    import boto3

    if settings.aws_conn_id:
        conn = airflow_connection(settings.aws_conn_id)
        extra = conn.get("extra") or {}
        return boto3.Session(
            aws_access_key_id=conn.get("login") or None,
            aws_secret_access_key=conn.get("password") or None,
            aws_session_token=extra.get("aws_session_token"),
            region_name=settings.region or extra.get("region_name"),
        )
    result = boto3.Session(profile_name=settings.profile, region_name=settings.region)
    if result.get_credentials() is None and settings.is_local_emulator():
        # An emulator on this machine accepts any credentials; a real endpoint never gets these.
        return boto3.Session(
            aws_access_key_id="emulator", aws_secret_access_key="emulator", region_name=settings.region or "us-east-1"
        )
    return result


def airflow_connection(conn_id: str) -> dict[str, Any]:
    """login, password and extra of an Airflow connection: ``AIRFLOW_CONN_<ID>`` first, then Airflow's backends."""
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if raw:
        return _parse_connection(conn_id, raw)
    try:
        from airflow.sdk import BaseHook  # only where Airflow runs; executors use the env var or the AWS chain
    except ImportError:
        raise ConfigError(
            f"aws_conn_id {conn_id!r}: no AIRFLOW_CONN_{conn_id.upper()} in the environment and Airflow is not "
            "installed here; set the variable, or use the standard AWS chain instead"
        ) from None
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as error:
        raise ConfigError(f"aws_conn_id {conn_id!r}: Airflow has no such connection ({error})") from None
    return {"login": conn.login, "password": conn.password, "extra": conn.extra_dejson}


def _parse_connection(conn_id: str, raw: str) -> dict[str, Any]:
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except ValueError:
            raise ConfigError(f"AIRFLOW_CONN_{conn_id.upper()} is neither a connection URI nor JSON") from None
        extra = value.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra or "{}")
        return {"login": value.get("login"), "password": value.get("password"), "extra": extra}
    url = urlparse(raw)
    extra = {k: v[-1] for k, v in parse_qs(url.query).items()}
    return {
        "login": unquote(url.username) if url.username else None,
        "password": unquote(url.password) if url.password else None,
        "extra": extra,
    }
