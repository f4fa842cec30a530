"""An S3-compatible store for the integration suite: one SeaweedFS (``weed mini``) per test session.

It listens on 127.0.0.1 only, checks every request's signature against the
one identity it was started with, and is stopped (its process group killed)
at the end of the session, also after a failure. Tests share it: each makes
its own bucket with ``s3_server.create_bucket()``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipelines.servers.s3 import S3Server, running_s3


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """``.endpoint``, ``.access_key``, ``.secret_key``, ``.region``; ``.env()`` gives the AWS variables for a
    process; ``.create_bucket()`` makes a fresh bucket; ``.client()`` is a signed boto3 client."""
    with running_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server
