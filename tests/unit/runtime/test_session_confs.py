"""The confs every Spark session gets: s3a from the standard AWS variables, never a key."""

from __future__ import annotations

import pytest

from pipelines.errors import PipelinesError
from pipelines.runtime.session import s3a_confs

pytestmark = pytest.mark.unit


def test_no_aws_variable_means_no_s3a_conf() -> None:
    assert s3a_confs({}) == {}


def test_an_s3_compatible_endpoint_gets_path_style_requests_and_its_region() -> None:
    env = {"AWS_ENDPOINT_URL": "https://s3.example.internal:9000", "AWS_REGION": "eu-west-3"}
    assert s3a_confs(env) == {
        "spark.hadoop.fs.s3a.endpoint": "https://s3.example.internal:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-3",
    }


def test_plain_http_needs_aws_allow_http_and_the_keys_never_become_confs() -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SECRET"}
    with pytest.raises(PipelinesError, match="AWS_ALLOW_HTTP=true"):
        s3a_confs(env)
    confs = s3a_confs({**env, "AWS_ALLOW_HTTP": "true"})
    assert confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert not any("SECRET" in v or v == "AK" for v in confs.values())


def test_the_region_alone_is_aws_itself() -> None:
    assert s3a_confs({"AWS_DEFAULT_REGION": "us-west-2"}) == {"spark.hadoop.fs.s3a.endpoint.region": "us-west-2"}
