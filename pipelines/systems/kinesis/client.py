"""The Kinesis API as this system calls it: one boto3 client per process, retries, and each shard's call limits.

Every call goes through ``KinesisClient.call``: throttling, transient 5xx
answers and connection errors are retried here (botocore's own retries are
off) so throttling can be counted in the metrics and backed off with jitter.
``ShardLimiter`` spaces each shard's calls and bytes to Kinesis's limits, per
process. Clients and limiters are cached per process, because executors call
``read`` once per micro-batch per slot. Credentials come from the standard
AWS chain, a named profile or an Airflow connection, and dummy ones only for
an emulator on the loopback interface. See docs/systems/kinesis.md, "Limits
and throttling" and "Settings and credentials".
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from pipelines.backoff import Backoff
from pipelines.errors import InputRewoundError, StreamError
from pipelines.systems.connections import read_connection
from pipelines.systems.kinesis.settings import KinesisSettings

THROTTLES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "ThrottlingException",
        "KMSThrottlingException",
    }
)

_LOCK = threading.Lock()
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_LIMITERS: dict[tuple[Any, ...], ShardLimiter] = {}


class ShardLimiter:
    """Calls and bytes per second for one shard, shared by a process's threads: a call waits for its turn.

    Calls are spaced ``1/calls_per_s`` apart (so never more than the limit in
    any second); bytes read are a debt repaid at ``bytes_per_s``, and the
    next call waits until it is, so a 10 MB answer pauses the shard for 5 s as
    Kinesis itself would.
    """

    def __init__(
        self,
        calls_per_s: float,
        bytes_per_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.interval = 1.0 / calls_per_s
        self.bytes_per_s = bytes_per_s
        self.clock = clock
        self.sleep = sleep
        self.next_call = 0.0
        self.debt = 0.0  # bytes not yet repaid at ``debt_at``
        self.debt_at = 0.0
        self.lock = threading.Lock()

    def acquire(self) -> float:
        """Wait for this call's turn; returns the seconds waited."""
        with self.lock:
            now = self.clock()
            repaid = self.debt_at + self.debt / self.bytes_per_s if self.debt > 0 else now
            at = max(now, self.next_call, repaid)
            self.next_call = at + self.interval
        wait = at - now
        if wait > 0:
            self.sleep(wait)
        return wait

    def spend(self, nbytes: int) -> None:
        with self.lock:
            now = self.clock()
            self.debt = max(0.0, self.debt - (now - self.debt_at) * self.bytes_per_s) + nbytes
            self.debt_at = now


class Trimmed(StreamError):
    """An iterator at a sequence number that is not in the shard any more."""


class ExpiredIterator(StreamError):
    """A shard iterator older than 5 minutes."""


class NotYet(StreamError):
    """An ``AT_TIMESTAMP`` iterator at a time the endpoint's clock has not reached (this host's clock is ahead)."""


class Unreachable(StreamError):
    """The endpoint did not answer (connection refused or reset, a timeout): an outage, worth waiting out."""


class KinesisClient:
    """The calls of one region/endpoint: this process's boto3 client, retried calls, per-shard limiters."""

    def __init__(self, settings: KinesisSettings) -> None:
        self.settings = settings
        self.backoff = Backoff(settings.backoff_base_s, settings.backoff_cap_s, "full")
        """Between tries of one call: throttling is contention, so full jitter."""

    def key(self) -> tuple[Any, ...]:
        """What the per-process caches (clients, limiters, iterators) are keyed by."""
        return (os.getpid(), *self.settings.client_key())

    @property
    def api(self) -> Any:
        """This process's boto3 Kinesis client for these settings (clients are thread-safe; sessions are not)."""
        key = self.key()
        with _LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                from botocore.config import Config

                s = self.settings
                config = Config(
                    retries={"total_max_attempts": 1},  # retried here, so throttling is counted and backed off
                    connect_timeout=s.connect_timeout_s,
                    read_timeout=s.request_timeout_s,
                    max_pool_connections=32,
                )
                client = session(s).client("kinesis", endpoint_url=s.endpoint_url, verify=s.verify_tls, config=config)
                _CLIENTS[key] = client
        return client

    def limiter(self, stream: str, shard: str, kind: str) -> ShardLimiter:
        key = (*self.key(), stream, shard, kind)
        with _LOCK:
            limiter = _LIMITERS.get(key)
            if limiter is None:
                limiter = _LIMITERS[key] = ShardLimiter(
                    self.settings.get_records_per_second, self.settings.read_bytes_per_second
                )
        return limiter

    def call(self, stream: str, operation: str, stats: Counter[str] | None = None, **kwargs: Any) -> Any:
        """One API call, retried with full-jitter back-off on throttling, on a 5xx answer and on transient network
        errors (the classification botocore's own retry handler makes; it is off, so throttling is counted)."""
        from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

        s = self.settings

        def transient(error: BaseException) -> bool:
            if isinstance(error, ClientError):
                if error.response.get("Error", {}).get("Code", "") in THROTTLES:
                    if stats is not None:
                        stats["throttled"] += 1
                    return True
                return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)) >= 500
            return isinstance(error, ConnectionError | HTTPClientError)

        try:
            # ``operation`` is a boto3 method name (``get_records``): the client's own dispatch, not a probe.
            return self.backoff.retry(
                lambda: getattr(self.api, operation)(**kwargs), attempts=s.max_attempts, retriable=transient
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code", "") in THROTTLES:
                raise refused_throughout(stream, operation, s.max_attempts, error) from None
            raise stream_error(stream, error, self.settings) from None
        except (ConnectionError, HTTPClientError) as error:
            raise Unreachable(
                f"cannot reach Kinesis at {s.endpoint_url or s.region or 'the default endpoint'}: {error}"
            ) from None


def refused_throughout(stream: str, operation: str, attempts: int, error: Any) -> StreamError:
    """The last of ``attempts`` throttling answers, with Kinesis's own words.

    ``LimitExceededException`` is a rate (``Rate exceeded for stream``, ``Limit exceeded for ListShards``) as
    often as a quota no retry lifts (``The shard count must be between 1 and 1000``, the account's shard
    limit, ten ``UpdateShardCount`` a day), and only the message tells which: the error quotes it, where it
    used to say that the shards were read or written too fast after a ``stream create`` asked for too many.
    """
    code = error.response.get("Error", {}).get("Code", "")
    message = error.response.get("Error", {}).get("Message", "") or str(error)
    said = f"Kinesis stream {stream!r}: {operation} was refused {attempts} times in a row ({code}: {message})"
    if code == "LimitExceededException":
        return StreamError(
            f"{said}; a Kinesis limit: a quota (shards, consumers, resharding a day) stays until the request or "
            "the account's limit changes, a rate passes: raise max_attempts / backoff_cap_s"
        )
    return StreamError(
        f"{said}; the stream's shards are read or written faster than Kinesis allows: lower the job's parallel "
        "readers or raise max_attempts / backoff_cap_s"
    )


def stream_error(stream: str, error: Any, settings: KinesisSettings) -> StreamError:
    """A Kinesis error as what it means here: a trimmed position, an expired iterator, or the stream's state."""
    code = error.response.get("Error", {}).get("Code", "")
    message = error.response.get("Error", {}).get("Message", "") or str(error)
    lowered = message.lower()
    if code == "ExpiredIteratorException":
        return ExpiredIterator(message)
    if code == "InvalidArgumentException" and "timestamp" in lowered and "future" in lowered:
        return NotYet(message)
    if code == "InvalidArgumentException" and "did not come from this stream" in lowered:
        # Kinesis's answer to a sequence number of another stream of the name: not trimmed records (below)
        return recreated(stream, f"Kinesis says: {message}")
    if (code == "ResourceNotFoundException" and "sequencenumber" in lowered.replace(" ", "")) or (
        code == "InvalidArgumentException" and "startingsequencenumber" in lowered.replace(" ", "")
    ):
        return Trimmed(message)
    where = settings.endpoint_url or settings.region or "the default region"
    if code == "ResourceNotFoundException":
        return StreamError(f"Kinesis stream {stream!r} does not exist at {where} ({message})")
    if code == "ResourceInUseException":
        return StreamError(f"Kinesis stream {stream!r} is not usable now: {message} (ResourceInUseException)")
    return StreamError(f"Kinesis stream {stream!r}: {code or 'error'}: {message}")


def recreated(stream: str, how: str) -> InputRewoundError:
    """The job's checkpoints are in a stream that was deleted, and another of its name now stands in its place.

    Not an outage to wait out, nor records trimmed by retention: the old shard ids and sequence numbers name
    nothing, or other records, in the new stream, so reading on would skip or re-read records without a word.
    """
    return InputRewoundError(
        f"Kinesis stream {stream!r} was deleted and created again under its name ({how}): the job's checkpoints "
        "hold shard ids and sequence numbers of the old stream, which name nothing or other records in the new "
        "one. The job stops rather than skip or read again what the stream holds now, and committed nothing "
        "from it. To read the stream as it is now, create a job for it afresh (pipelines job create, with its "
        "own name and sink)"
    )


# ------------------------------------------------------------------ credentials


def session(settings: KinesisSettings) -> Any:
    """A boto3 session with the credentials the settings point to; nothing secret is logged or pickled."""
    import boto3

    if settings.aws_conn_id:
        conn = read_connection(settings.aws_conn_id, "aws_conn_id", ", or use the standard AWS chain instead")
        return boto3.Session(
            aws_access_key_id=conn.login or None,
            aws_secret_access_key=conn.password or None,
            aws_session_token=conn.extra.get("aws_session_token"),
            region_name=settings.region or conn.extra.get("region_name"),
        )
    result = boto3.Session(profile_name=settings.profile, region_name=settings.region)
    if result.get_credentials() is None and settings.is_local_emulator():
        # An emulator on this machine accepts any credentials; a real endpoint never gets these.
        return boto3.Session(
            aws_access_key_id="emulator", aws_secret_access_key="emulator", region_name=settings.region or "us-east-1"
        )
    return result
