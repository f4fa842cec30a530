"""The test session's S3 store is a real one: signed requests only, no bucket by accident, loopback only."""

from __future__ import annotations

import boto3
import psutil
import pytest
from botocore.exceptions import ClientError

from testbed.servers.s3 import S3Server

pytestmark = pytest.mark.integration


def test_the_store_checks_signatures_and_creates_no_bucket_on_its_own(s3_server: S3Server) -> None:
    bucket = s3_server.create_bucket()
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="a/b", Body=b"x")
    assert client.get_object(Bucket=bucket, Key="a/b")["Body"].read() == b"x"

    forged = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint,
        aws_access_key_id=s3_server.access_key,
        aws_secret_access_key=s3_server.secret_key + "x",
        region_name=s3_server.region,
    )
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        forged.get_object(Bucket=bucket, Key="a/b")
    with pytest.raises(ClientError, match="NoSuchBucket"):
        client.put_object(Bucket=f"{bucket}-unmade", Key="k", Body=b"x")


def test_the_store_listens_on_loopback_only(s3_server: S3Server) -> None:
    port = int(s3_server.endpoint.rsplit(":", 1)[1])
    owner = next(c.pid for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port)
    listening = [c.laddr for c in psutil.Process(owner).net_connections("tcp") if c.status == "LISTEN"]
    assert len(listening) >= 5, listening  # master, volume, filer, S3, ... each on a port of its own
    assert {a.ip for a in listening} == {"127.0.0.1"}, listening
