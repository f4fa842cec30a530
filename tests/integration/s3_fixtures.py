"""An S3-compatible store for the integration suite: one SeaweedFS (``weed mini``) per test session.

It listens on 127.0.0.1 only, checks every request's signature against the
one identity it was started with, and is stopped (its process group killed)
at the end of the session, also after a failure. Tests share it: each makes
its own bucket with ``s3_server.create_bucket()``.

For the session, the pytest process's environment points S3 clients at it
(``AWS_ENDPOINT_URL_S3``, which only S3 clients read: Kinesis clients keep
their own endpoint), before the shared SparkSession starts, so in-process
drivers, Spark's Python workers and every CLI a test starts can use an
``s3://`` home. A home on local disk never touches it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testbed.servers.s3 import S3Server, running_s3


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """``.endpoint``, ``.access_key``, ``.secret_key``, ``.region``; ``.env()`` gives the AWS variables for a
    process; ``.create_bucket()`` makes a fresh bucket; ``.client()`` is a signed boto3 client."""
    with running_s3(tmp_path_factory.mktemp("s3")) as server:
        env = server.env()
        env["AWS_ENDPOINT_URL_S3"] = env.pop("AWS_ENDPOINT_URL")
        before = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield server
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
