"""The job YAML's ``systems: kinesis:`` section, a pydantic model checked before anything connects.

Each setting says its meaning in its description (also in the published
JSON schema, ``docs/job-schema.json``); an unknown key is refused with the
closest match. Credentials never come from the YAML (``client`` resolves
them): a key that looks like one is refused with the reason. See
docs/systems/kinesis.md, "Settings and credentials".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlparse

from pydantic import AfterValidator, Field, model_validator

from pipelines.settings import (
    NonEmptyText,
    OneOf,
    PositiveNumber,
    PositiveWhole,
    Section,
    StrictBool,
    Text,
    Whole,
    check,
    section_error,
    value_error,
)

_SECRET_WORDS = ("secret", "password", "access_key", "session_token", "credential", "token")
ON_TRIMMED = ("fail", "skip")


def _http_url(value: str | None) -> str | None:
    if value is not None and urlparse(value).scheme not in ("http", "https"):
        raise value_error("must be an http(s) URL")
    return value


class KinesisSettings(Section):
    """Where the streams are, how their calls are retried and limited, and what a trimmed record does."""

    region: NonEmptyText | None = Field(None, description="AWS region such as eu-west-1; else the standard chain's")
    endpoint_url: Annotated[str, Text(), AfterValidator(_http_url)] | None = Field(
        None, description="an emulator's or VPC endpoint's URL"
    )
    profile: NonEmptyText | None = Field(None, description="a named profile of the standard AWS chain")
    aws_conn_id: NonEmptyText | None = Field(None, description="an Airflow connection holding the credentials")
    verify_tls: StrictBool = Field(True, description="verify the endpoint's TLS certificate")
    max_attempts: PositiveWhole = Field(8, description="attempts per call on throttling and transient errors")
    backoff_base_s: PositiveNumber = Field(0.1, description="first back-off; it doubles per try, with full jitter")
    backoff_cap_s: PositiveNumber = Field(5.0, description="longest back-off")
    get_records_per_second: PositiveNumber = Field(
        5.0, description="GetRecords calls per shard and second, per process"
    )
    read_bytes_per_second: PositiveWhole = Field(2_000_000, description="bytes read per shard and second, per process")
    get_records_limit: Annotated[int, Whole(1, 10_000)] = Field(
        10_000, description="records per GetRecords call; Kinesis allows at most 10000"
    )
    read_wait_s: PositiveNumber = Field(
        2.0, description="how long one read waits on a shard that is behind but returns empty pages"
    )
    replay_timeout_s: PositiveNumber = Field(
        120.0, description="how long a replayed micro-batch may take to reach its pinned end"
    )
    read_timeout_s: PositiveNumber = Field(
        30.0, description="how long one read waits out an endpoint that does not answer before its task fails"
    )
    connect_timeout_s: PositiveNumber = Field(5.0, description="TCP connect timeout")
    request_timeout_s: PositiveNumber = Field(30.0, description="socket read timeout")
    on_trimmed: Annotated[str, OneOf(*ON_TRIMMED)] = Field(
        "fail", description="fail; or skip unread records trimmed by retention, counting and logging them"
    )

    @classmethod
    def refuse(cls, key: str) -> str | None:
        if any(word in key.lower() for word in _SECRET_WORDS):
            return (
                f"{key}: credentials never go in the job YAML; use the standard AWS chain (environment, profile, "
                "instance or container role), 'profile', or 'aws_conn_id' (an Airflow connection)"
            )
        return None

    @model_validator(mode="after")
    def _one_source_of_credentials(self) -> KinesisSettings:
        if self.profile and self.aws_conn_id:
            raise section_error("give either 'profile' or 'aws_conn_id', not both")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Only what differs from the defaults: what a job YAML would say."""
        return self.model_dump(exclude_defaults=True)

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


def validate_settings(
    raw: Mapping[str, Any] | KinesisSettings | None, origin: str = "systems.kinesis"
) -> KinesisSettings:
    """The settings a job YAML gives, checked; ``origin`` names where they came from in error messages."""
    if isinstance(raw, KinesisSettings):
        return raw
    settings: KinesisSettings = check(KinesisSettings, raw, origin)
    return settings
