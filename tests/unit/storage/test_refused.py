"""Which of boto3's errors the CLI reports as the store's refusal (one error line) and which stay a traceback."""

from __future__ import annotations

import pytest
from botocore import exceptions as boto

from pipelines.errors import DamagedTableError, StoreUnavailableError
from pipelines.storage.objects import refused, unanswered


def _client_error(code: str, status: int, message: str = "said the store") -> boto.ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return boto.ClientError(response, "GetObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "error",
    [
        _client_error("SignatureDoesNotMatch", 403),
        _client_error("NoSuchBucket", 404),
        _client_error("SomethingNew", 403),  # any 401/403 is the keys' or the policy's
        boto.EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        boto.NoCredentialsError(),
    ],
)
def test_refusals_and_silence_are_the_users_to_fix(error: Exception) -> None:
    message = refused(error)
    assert message and "\n" not in message


def test_the_code_and_the_stores_message_are_named() -> None:
    assert refused(_client_error("InvalidAccessKeyId", 403, "no such key id")) == (
        "the store refused GetObject: InvalidAccessKeyId: no such key id"
    )


@pytest.mark.parametrize(
    "error",
    [
        _client_error("InternalError", 500),  # the store's trouble, retried by boto3 already: not a user mistake
        boto.ParamValidationError(report="Bucket is required"),  # our bug: keeps its traceback
        ValueError("not boto's"),
    ],
)
def test_everything_else_stays_an_exception(error: Exception) -> None:
    assert refused(error) is None


@pytest.mark.parametrize(
    "error",
    [
        _client_error("ServiceUnavailable", 503),
        _client_error("SlowDown", 503),
        _client_error("InternalError", 500),
        boto.EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        boto.ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
        StoreUnavailableError("the store of s3://b/h did not answer"),
    ],
)
def test_no_answer_and_server_errors_are_an_outage_the_driver_runs_through(error: Exception) -> None:
    assert unanswered(error)


@pytest.mark.parametrize(
    "error",
    [
        _client_error("SignatureDoesNotMatch", 403),
        _client_error("NoSuchKey", 404),
        boto.NoCredentialsError(),
        DamagedTableError("control table 'job_models' cannot be read"),
        ValueError("a bug"),
    ],
)
def test_refusals_damage_and_bugs_are_no_outage(error: Exception) -> None:
    assert not unanswered(error)
