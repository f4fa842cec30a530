"""S3 settings, read the way the AWS tools and delta-rs read them: the standard ``AWS_*`` environment variables.

One reading feeds the four clients that talk to the bucket (boto3 for small
records, ``pyarrow.fs`` for data files, delta-rs for commits, hadoop-aws for
Spark's own checkpoint), so they can never disagree about where the home is.
An Airflow connection is turned into these variables by the plugin's hook;
nothing else configures S3.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from pipelines.errors import ConfigError

DEFAULT_REGION = "us-east-1"
TRUE = ("1", "true", "yes", "on")
ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ALLOW_HTTP",
    "AWS_PROFILE",
)
"""Every variable read here: what a process must pass on to the processes it starts (Spark's executors)."""


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str | None  # None: AWS itself
    region: str
    access_key_id: str | None  # None: the SDKs' default credential chain (profile, instance role, ...)
    secret_access_key: str | None
    session_token: str | None
    allow_http: bool
    region_given: bool = True  # False: the default region, which nobody asked for (s3a then uses its own)

    @classmethod
    def from_environment(cls, env: dict[str, str] | None = None) -> S3Settings:
        env = dict(os.environ) if env is None else env
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        allow_http = env.get("AWS_ALLOW_HTTP", "").strip().lower() in TRUE
        if endpoint is not None:
            parsed = urlparse(endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ConfigError(f"AWS_ENDPOINT_URL {endpoint!r} is not an http(s)://host[:port] URL")
            if parsed.scheme == "http" and not allow_http:
                raise ConfigError(
                    f"AWS_ENDPOINT_URL {endpoint!r} is plain http: set AWS_ALLOW_HTTP=true to allow it "
                    "(credentials and data then travel unencrypted), or use https"
                )
        key, secret = env.get("AWS_ACCESS_KEY_ID") or None, env.get("AWS_SECRET_ACCESS_KEY") or None
        if (key is None) != (secret is None):
            missing = "AWS_SECRET_ACCESS_KEY" if secret is None else "AWS_ACCESS_KEY_ID"
            raise ConfigError(f"{missing} is not set while its pair is: give both, or neither to use a profile")
        return cls(
            endpoint_url=endpoint.rstrip("/") if endpoint else None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            access_key_id=key,
            secret_access_key=secret,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            allow_http=allow_http,
            region_given=bool(env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")),
        )

    def identity(self) -> tuple[str, ...]:
        """What tells two configurations apart (the secret is not part of it)."""
        return (self.endpoint_url or "aws", self.region, self.access_key_id or "", str(self.allow_http))

    @property
    def _scheme(self) -> str:
        return urlparse(self.endpoint_url).scheme if self.endpoint_url else "https"

    def boto3_client(self) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            region_name=self.region,
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=5,
            read_timeout=30,
            s3={"addressing_style": "path" if self.endpoint_url else "auto"},
        )
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
            config=config,
        )

    def arrow_filesystem(self) -> Any:
        import pyarrow.fs as pafs

        kwargs: dict[str, Any] = {
            "region": self.region,
            "connect_timeout": 5,
            "request_timeout": 30,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=5),
            "allow_bucket_creation": False,
            "allow_bucket_deletion": False,
        }
        if self.endpoint_url:
            parsed = urlparse(self.endpoint_url)
            kwargs["endpoint_override"] = parsed.netloc + parsed.path
            kwargs["scheme"] = parsed.scheme
        if self.access_key_id:
            kwargs["access_key"] = self.access_key_id
            kwargs["secret_key"] = self.secret_access_key
            if self.session_token:
                kwargs["session_token"] = self.session_token
        return pafs.S3FileSystem(**kwargs)

    def delta_options(self) -> dict[str, str]:
        options = {"AWS_REGION": self.region}
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.allow_http:
            options["AWS_ALLOW_HTTP"] = "true"
        if self.access_key_id and self.secret_access_key:
            options["AWS_ACCESS_KEY_ID"] = self.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
            if self.session_token:
                options["AWS_SESSION_TOKEN"] = self.session_token
        return options

    def hadoop_confs(self) -> dict[str, str]:
        """Spark confs for hadoop-aws (``s3a://``): path-style access where an endpoint is given.

        The keys never become confs (a conf is on spark-submit's command line,
        which ``ps`` shows): s3a's default credential chain reads
        ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` from the
        environment of the driver and of each executor's host.
        """
        confs: dict[str, str] = {}
        if self.endpoint_url:
            confs["spark.hadoop.fs.s3a.endpoint"] = self.endpoint_url
            confs["spark.hadoop.fs.s3a.path.style.access"] = "true"
            confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(self._scheme == "https").lower()
        if self.region_given:
            confs["spark.hadoop.fs.s3a.endpoint.region"] = self.region
        return confs


def passed_on(env: dict[str, str] | None = None) -> dict[str, str]:
    """The ``AWS_*`` variables set here, for the processes this one starts on other hosts (executors)."""
    env = dict(os.environ) if env is None else env
    return {k: env[k] for k in ENVIRONMENT if env.get(k)}
