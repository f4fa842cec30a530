"""Kafka as an input system: admin, consumer and producer over ``confluent-kafka`` (librdkafka).

Spark's own Kafka source is a Maven artifact and cannot split a partition by
key, so jobs read Kafka through this module from the Python data source.
Positions are decimal "next offset to read" strings, ends are the last stable
offset (reads are ``read_committed``), and the job's progress is mirrored to
its consumer group for Kafka's own tools; expansion points are kept by
``kafka_expansions``. What it guarantees and how it is configured:
docs/systems/kafka.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from pipelines.errors import ConfigError, PartitionChangeError, StreamError, refuse_unknown
from pipelines.systems.base import (
    RECORD_SCHEMA,
    Bounded,
    End,
    PartitionMetadata,
    Position,
    ReadResult,
    Record,
    StreamMetadata,
)
from pipelines.systems.kafka_expansions import DEFAULT_GRACE_MS, ExpansionLog
from pipelines.systems.offsets import OffsetOrder, parse_offset

SYSTEM = "kafka"

FIELDS = (
    "bootstrap_servers",
    "properties",
    "secrets_env",
    "connection_id",
    "timeout_ms",
    "read_timeout_ms",
    "consumer_group",
    "commit_progress",
    "expansion_grace_ms",
)
_SECRET_MARKERS = ("password", "secret", "key.pem", "sasl.oauthbearer.config", "sasl.jaas")
_OWNED = (
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "isolation.level",
    "enable.partition.eof",
    "partitioner",
    "transactional.id",
)
"""Client properties this module sets itself: the contract depends on them, so a job may not override them."""
_FETCH_BATCH = 10_000
_REFUSALS = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL)
"""Client errors that mean the brokers answer but refuse us: retrying cannot help, the user must act."""
_CLIENT_LOG = logging.getLogger(__name__ + ".librdkafka")
_CLIENT_LOG.addHandler(logging.NullHandler())  # shown where the application configures logging, never raw on stderr


@dataclass(frozen=True)
class KafkaSettings:
    """The validated ``systems.kafka`` section (secrets not resolved yet: that happens in the process that connects)."""

    bootstrap_servers: str
    properties: Mapping[str, str] = field(default_factory=dict)
    secrets_env: Mapping[str, str] = field(default_factory=dict)
    connection_id: str | None = None
    timeout_ms: int = 10_000
    read_timeout_ms: int = 30_000
    consumer_group: str | None = None
    commit_progress: bool = True
    expansion_grace_ms: int = DEFAULT_GRACE_MS  # kafka_expansions: how long producers may take to switch


def validate_settings(settings: Mapping[str, Any], where: str = "systems.kafka") -> KafkaSettings:
    """Check a ``systems.kafka`` section; every mistake names its field, a misspelled one is refused."""
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{where} must be a mapping of settings")
    refuse_unknown(where, settings, FIELDS)
    servers = settings.get("bootstrap_servers")
    if isinstance(servers, list | tuple) and servers and all(isinstance(s, str) and s for s in servers):
        servers = ",".join(servers)
    if not isinstance(servers, str) or not servers.strip():
        raise ConfigError(f"{where}.bootstrap_servers: give the brokers as 'host:port,host:port' or a list")
    properties = settings.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise ConfigError(f"{where}.properties must be a mapping of librdkafka client properties")
    clean: dict[str, str] = {}
    for name, value in properties.items():
        if not isinstance(name, str) or isinstance(value, Mapping | list | tuple) or value is None:
            raise ConfigError(f"{where}.properties.{name}: a client property needs a scalar value, got {value!r}")
        if name in _OWNED:
            raise ConfigError(f"{where}.properties.{name} is set by the platform (reads depend on it); remove it")
        if _looks_secret(name):
            raise ConfigError(
                f"{where}.properties.{name} looks like a secret: never put it in the job YAML; name an "
                f"environment variable in {where}.secrets_env ({name}: MY_ENV_VAR) or an Airflow "
                f"connection in {where}.connection_id"
            )
        clean[name] = str(value).lower() if isinstance(value, bool) else str(value)
    secrets_env = settings.get("secrets_env") or {}
    if not isinstance(secrets_env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in secrets_env.items()
    ):
        raise ConfigError(f"{where}.secrets_env must map client properties to environment variable names")
    connection_id = settings.get("connection_id")
    if connection_id is not None and (not isinstance(connection_id, str) or not connection_id):
        raise ConfigError(f"{where}.connection_id must be the id of an Airflow connection")
    timeouts = {}
    for name, default in (("timeout_ms", 10_000), ("read_timeout_ms", 30_000)):
        value = settings.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}.{name} must be a whole number of milliseconds >= 1, got {value!r}")
        timeouts[name] = value
    group = settings.get("consumer_group")
    if group is not None and (not isinstance(group, str) or not group):
        raise ConfigError(f"{where}.consumer_group must be a group name (default: the job's name)")
    commit = settings.get("commit_progress", True)
    if not isinstance(commit, bool):
        raise ConfigError(f"{where}.commit_progress must be true or false")
    grace = settings.get("expansion_grace_ms", DEFAULT_GRACE_MS)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise ConfigError(
            f"{where}.expansion_grace_ms must be a whole number of milliseconds >= 0 (at least the producers' "
            f"metadata.max.age.ms), got {grace!r}"
        )
    return KafkaSettings(
        bootstrap_servers=servers.strip(),
        properties=clean,
        secrets_env=dict(secrets_env),
        connection_id=connection_id,
        consumer_group=group,
        commit_progress=commit,
        expansion_grace_ms=grace,
        **timeouts,
    )


def position_key(position: Position) -> int:
    """The order of this system's positions, without a client (offline tools, e.g. ``model migrate``)."""
    return _offset(position)


class KafkaSystem(OffsetOrder):
    """Kafka as an ``InputSystem``; clients are made on first use and are per process (it pickles to settings)."""

    system: str = SYSTEM

    def __init__(self, settings: Mapping[str, Any], home: Any = None) -> None:
        """``home`` (a ``Home``) keeps the expansions this platform observed; without it nothing is held back."""
        self._raw = dict(settings)
        self.home = home
        self.settings = validate_settings(settings)
        self.brokers = self.settings.bootstrap_servers
        self._lock = threading.Lock()
        self._local = threading.local()
        self._consumers: list[Consumer] = []
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._committers: dict[str, Consumer] = {}
        self._client_conf: dict[str, Any] | None = None
        self._refused: str | None = None  # the brokers' last authentication refusal, from any client's error_cb

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self._raw, "home": self.home}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state.get("home"))  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"KafkaSystem({self.brokers!r})"

    # --------------------------------------------------------------- clients

    def _conf(self) -> dict[str, Any]:
        """Properties every client gets: bootstrap servers, the job's properties, secrets resolved here.

        librdkafka logs through Python's logging (``pipelines.systems.kafka.librdkafka``), not straight onto
        stderr, and its error callback notes an authentication refusal so that it is reported as one, instead
        of as a broker that "did not answer" (librdkafka retries a refused login until the request times out).
        """
        if self._client_conf is None:
            conf: dict[str, Any] = {
                "bootstrap.servers": self.brokers,
                **self.settings.properties,
                "error_cb": self._client_error,
                "logger": _CLIENT_LOG,
            }
            conf.update(_connection_properties(self.settings.connection_id))
            for prop, env in self.settings.secrets_env.items():
                value = os.environ.get(env)
                if value is None:
                    raise ConfigError(f"systems.kafka.secrets_env.{prop}: environment variable {env} is not set")
                conf[prop] = value
            conf["bootstrap.servers"] = self.brokers
            self._client_conf = conf
        return dict(self._client_conf)

    def _admin_client(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                # Describing a topic must never create it (brokers auto-create on metadata requests by default).
                self._admin = AdminClient({**self._conf(), "allow.auto.create.topics": "false"})
            return self._admin

    def _consumer(self) -> Consumer:
        consumer = getattr(self._local, "consumer", None)
        if consumer is None:
            consumer = Consumer(
                {
                    **self._conf(),
                    "group.id": "pipelines-reader",  # required by the client; never joined (assign only)
                    "enable.auto.commit": "false",
                    "enable.auto.offset.store": "false",
                    "isolation.level": "read_committed",
                    "enable.partition.eof": "true",
                    "auto.offset.reset": "error",
                    "allow.auto.create.topics": "false",
                    # A read ends at the partition's end: a long-polled fetch would only delay the EOF event,
                    # and the next assign waits for the fetch in flight.
                    "fetch.wait.max.ms": "20",
                    "fetch.error.backoff.ms": "50",
                }
            )
            self._local.consumer = consumer
            with self._lock:
                self._consumers.append(consumer)
        return consumer

    def _producer_client(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(
                    {
                        "linger.ms": "5",
                        **self._conf(),
                        "partitioner": "murmur2_random",
                        "enable.idempotence": "true",
                    }
                )
            return self._producer

    @property
    def _timeout_s(self) -> float:
        return self.settings.timeout_ms / 1000

    def _client_error(self, error: KafkaError) -> None:
        if error.code() in _REFUSALS:
            # "sasl_plaintext://host:port/bootstrap: SASL authentication error: ... (after 301ms in state AUTH_REQ)"
            reason = re.sub(r"^\S+://\S+: ", "", error.str())
            self._refused = re.sub(r" \(after \d+ms in state \w+\)$", "", reason)

    def _refusal(self, doing: str) -> StreamError | None:
        """The brokers refused our credentials (seen by any client so far): the error to raise, else None."""
        if self._admin is not None:
            self._admin.poll(0)  # serves the admin client's error callbacks
        if self._refused is None:
            return None
        return StreamError(
            f"Kafka brokers {self.brokers} refused the connection while {doing}: {self._refused}; check "
            "systems.kafka.properties (security.protocol, sasl.mechanism, sasl.username, ssl.*) and the secrets in "
            "systems.kafka.secrets_env / connection_id"
        )

    # ----------------------------------------------------------------- admin

    def partition_count(self, stream: str) -> int:
        """The topic's partition count from the cluster's metadata; unknown topics and dead brokers are errors."""
        return self._metadata(stream)[0]

    def _metadata(self, stream: str) -> tuple[int, str]:
        """(partition count, cluster id) of a topic; asked in slices of at most 1 s, so a refused login ends it."""
        admin = self._admin_client()
        doing = f"describing topic {stream!r}"
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                meta = admin.list_topics(topic=stream, timeout=max(0.05, min(1.0, deadline - time.monotonic())))
                break
            except KafkaException as error:
                refused = self._refusal(doing)
                if refused is not None:
                    raise refused from None
                if time.monotonic() >= deadline:
                    raise self._error(doing, error) from None
        topic = meta.topics.get(stream)
        if topic is None:
            raise StreamError(f"Kafka topic {stream!r} is missing from the metadata of {self.brokers}")
        if topic.error is not None:
            raise self._topic_error(stream, topic.error)
        return len(topic.partitions), str(meta.cluster_id or self.brokers)

    def _expansions(self, stream: str, count: int, cluster: str) -> list[Any]:
        """The expansions of ``stream`` this platform observed, recording what ``count`` shows now."""
        if self.home is None:
            return []
        log = ExpansionLog(self.home.root, cluster, stream)
        ends = lambda: self._list_offsets(stream, count, OffsetSpec.latest())  # noqa: E731 - only when a point is due
        return log.observe(count, ends, self.settings.expansion_grace_ms)

    def describe(self, stream: str) -> StreamMetadata:
        count, cluster = self._metadata(stream)
        expansions = self._expansions(stream, count, cluster)
        earliest = self._list_offsets(stream, count, OffsetSpec.earliest())
        ends = self._list_offsets(stream, count, OffsetSpec.latest())
        return StreamMetadata(
            system=SYSTEM,
            stream=stream,
            partitions={
                p: PartitionMetadata(partition=p, earliest=str(earliest[p]), end=str(ends[p])) for p in range(count)
            },
            expansions=[e for e in expansions if e.end_offsets],  # settled ones; pending ones hold everything
            details={"brokers": self.brokers, "cluster_id": cluster},
        )

    def end_positions(self, stream: str) -> dict[int, Position]:
        count = self.partition_count(stream)
        return {p: str(o) for p, o in self._list_offsets(stream, count, OffsetSpec.latest()).items()}

    def _list_offsets(self, stream: str, count: int, spec: OffsetSpec) -> dict[int, int]:
        request = {TopicPartition(stream, p): spec for p in range(count)}
        try:
            futures = self._admin_client().list_offsets(
                request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self._timeout_s
            )
            return {tp.partition: int(f.result().offset) for tp, f in futures.items()}
        except KafkaException as error:
            raise self._error(f"listing offsets of topic {stream!r}", error) from None

    def records_between(self, stream: str, partition: int, start: Position, end: Position) -> int:
        """The offset difference: an upper bound (gaps hold no records), and what Kafka's lag tools report."""
        return max(0, _offset(end) - _offset(start))

    def read_limits(self, stream: str, floors: Mapping[int, Position]) -> dict[int, Position | None]:
        """New partitions held back until their source is past the expansion point (``kafka_expansions``)."""
        if self.home is None:
            return {}
        count, cluster = self._metadata(stream)
        expansions = self._expansions(stream, count, cluster)
        log = ExpansionLog(self.home.root, cluster, stream)
        return dict.fromkeys(log.holds(expansions, floors, _offset))

    def advance(
        self,
        stream: str,
        floors: Mapping[int, Position],
        records: Mapping[int, int],
        limits: Mapping[int, Position],
    ) -> dict[int, End]:
        """``min(floor + N, limit)``: at most N records, since gaps only remove records (docs/systems/kafka.md)."""
        return {p: str(min(_offset(floors[p]) + max(n, 0), _offset(limits[p]))) for p, n in records.items()}

    def create(self, stream: str, partitions: int) -> StreamMetadata:
        count = _validate_count(partitions)
        futures = self._admin_client().create_topics(
            [NewTopic(stream, count, replication_factor=-1)],
            operation_timeout=self._timeout_s,
            request_timeout=self._timeout_s,
        )
        try:
            futures[stream].result()
        except KafkaException as error:
            code = error.args[0].code() if error.args else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                raise StreamError(f"Kafka topic {stream!r} already exists on {self.brokers}") from None
            raise self._error(f"creating topic {stream!r}", error) from None
        return self._wait_for(stream, count)

    def expand(self, stream: str, partitions: int) -> StreamMetadata:
        """Grow to a multiple of the current count with ``CreatePartitions``; the current count is a no-op."""
        count = _validate_count(partitions)
        current = self.partition_count(stream)
        if count == current:
            return self.describe(stream)
        if count < current:
            raise PartitionChangeError(
                f"Kafka topic {stream!r} has {current} partitions; Kafka cannot shrink a topic to {count}"
            )
        if count % current:
            raise PartitionChangeError(
                f"Kafka topic {stream!r} has {current} partitions; the new count must be a multiple of it "
                f"(e.g. {2 * current} or {3 * current}), got {count}, so that every key moves from "
                f"partition p only to partitions p' with p' mod {current} == p"
            )
        futures = self._admin_client().create_partitions(
            [NewPartitions(stream, count)], operation_timeout=self._timeout_s, request_timeout=self._timeout_s
        )
        try:
            futures[stream].result()
        except KafkaException as error:
            raise self._error(f"adding partitions to topic {stream!r}", error) from None
        return self._wait_for(stream, count)

    def _wait_for(self, stream: str, count: int) -> StreamMetadata:
        """Metadata propagates to every broker a little after the controller answers."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                if self.partition_count(stream) == count:
                    return self.describe(stream)
            except StreamError:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise StreamError(f"Kafka topic {stream!r} on {self.brokers} did not show {count} partitions in time")
            time.sleep(0.1)

    # -------------------------------------------------------------- consumer

    def read(
        self, stream: str, partition: int, start: Position, end: End, *, columns: Sequence[str] | None = None
    ) -> ReadResult:
        """``[start, end)`` or at most ``end.records`` records; ends in gaps complete (docs/systems/kafka.md)."""
        first = _offset(start)
        if isinstance(end, Bounded):
            stop, budget = None, max(end.records, 0)
            if budget == 0:
                return ReadResult(RECORD_SCHEMA.empty_table(), str(first))
        else:
            stop, budget = _offset(end), None
            if stop < first:
                raise StreamError(f"Kafka topic {stream!r} partition {partition}: end {stop} is before start {first}")
            if stop == first:
                return ReadResult(RECORD_SCHEMA.empty_table(), str(first))
        consumer = self._consumer()
        consumer.assign([TopicPartition(stream, partition, first)])
        rows = _Rows(partition)
        position = first
        deadline = time.monotonic() + self.settings.read_timeout_ms / 1000
        last_error: KafkaError | None = None
        try:
            done = False
            while not done:
                want = _FETCH_BATCH if budget is None else min(_FETCH_BATCH, budget - len(rows))
                # consume() waits until it has all it asked for: take what is queued, else wait for one.
                batch = consumer.consume(num_messages=want, timeout=0)
                if not batch:
                    one = consumer.poll(0.1)
                    batch = [] if one is None else [one]
                for msg in batch:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            # The broker's fetch position: everything below it has been delivered or was a gap.
                            eof = int(msg.offset())
                            if stop is None:
                                position, done = max(position, eof), True
                            elif eof >= stop:
                                position, done = stop, True
                            if done:
                                break
                            continue
                        if error.fatal() or error.code() in (
                            KafkaError._AUTO_OFFSET_RESET,
                            KafkaError.OFFSET_OUT_OF_RANGE,
                            KafkaError.UNKNOWN_TOPIC_OR_PART,
                            KafkaError.TOPIC_AUTHORIZATION_FAILED,
                        ):
                            raise self._read_error(stream, partition, first, error)
                        last_error = error  # transient (a broker down): librdkafka retries, we wait
                        continue
                    offset = int(msg.offset())
                    if stop is not None and offset >= stop:
                        position, done = stop, True
                        break
                    rows.add(msg)
                    position = offset + 1
                    if (stop is not None and position >= stop) or (budget is not None and len(rows) >= budget):
                        done = True
                        break
                if not done and self._refused is not None:
                    raise self._refusal(f"reading topic {stream!r} partition {partition}") or StreamError(self._refused)
                if not done and time.monotonic() > deadline:
                    target = f"offset {stop}" if stop is not None else "its end"
                    cause = f"; last error: {last_error.str()}" if last_error is not None else ""
                    raise StreamError(
                        f"Kafka topic {stream!r} partition {partition} on {self.brokers}: reading from offset "
                        f"{first} did not reach {target} within {self.settings.read_timeout_ms} ms (at "
                        f"{position}){cause}"
                    )
        finally:
            consumer.unassign()
        table = rows.table()
        return ReadResult(table, str(position), bytes_fetched=rows.bytes)

    def acknowledge(self, job: str, stream: str, positions: Mapping[int, Position]) -> None:
        """Commit the job's floors to its consumer group, so Kafka's lag tools see its progress."""
        if not self.settings.commit_progress or not positions:
            return
        group = self.settings.consumer_group or job
        committer = self._committers.get(group)
        if committer is None:
            committer = Consumer(
                {**self._conf(), "group.id": group, "enable.auto.commit": "false", "allow.auto.create.topics": "false"}
            )
            self._committers[group] = committer
        offsets = [TopicPartition(stream, p, _offset(pos)) for p, pos in sorted(positions.items())]
        try:
            result = committer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            raise self._error(f"committing progress of group {group!r} on topic {stream!r}", error) from None
        failed = [tp for tp in result or [] if tp.error is not None]
        if failed:
            raise StreamError(
                f"Kafka group {group!r} on {self.brokers}: commit of topic {stream!r} partitions "
                f"{[tp.partition for tp in failed]} failed: {failed[0].error}"
            )

    def committed(self, group: str, stream: str) -> dict[int, Position]:
        """What a consumer group has committed on a topic (what lag tools read); partitions without a commit omitted."""
        count = self.partition_count(stream)
        reader = Consumer({**self._conf(), "group.id": group, "enable.auto.commit": "false"})
        try:
            found = reader.committed([TopicPartition(stream, p) for p in range(count)], timeout=self._timeout_s)
        except KafkaException as error:
            raise self._error(f"reading committed offsets of group {group!r}", error) from None
        finally:
            reader.close()
        return {tp.partition: str(tp.offset) for tp in found if tp.offset >= 0}

    # -------------------------------------------------------------- producer

    def produce(self, stream: str, records: Iterable[Record]) -> list[tuple[int, Position]]:
        """Append records, keyed ones where Java's producer puts them; returns (partition, offset) in input order."""
        producer = self._producer_client()
        placed: list[tuple[int, Position] | None] = []
        errors: list[str] = []

        def delivered(index: int) -> Any:
            def callback(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    errors.append(f"record {index}: {err.str()}")
                else:
                    placed[index] = (int(msg.partition()), str(msg.offset()))

            return callback

        for i, record in enumerate(records):
            try:
                key, value, headers = record
            except (TypeError, ValueError):
                raise StreamError(f"record {i} must be a (key, value, headers) tuple, got {record!r:.80}") from None
            if key is not None and not isinstance(key, bytes | bytearray | memoryview):
                raise StreamError(f"record {i}: key must be bytes or None, got {type(key).__name__}")
            if not isinstance(value, bytes | bytearray | memoryview):
                raise StreamError(f"record {i}: value must be bytes, got {type(value).__name__}")
            if headers is not None and not (
                isinstance(headers, Mapping)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
            ):
                raise StreamError(f"record {i}: headers must be a mapping of str to str or None")
            placed.append(None)
            kwargs: dict[str, Any] = {"value": bytes(value), "on_delivery": delivered(i)}
            if key is not None:
                kwargs["key"] = bytes(key)
            if headers:
                kwargs["headers"] = [(k, v.encode()) for k, v in headers.items()]
            while True:
                try:
                    producer.produce(stream, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: let deliveries drain it
                except KafkaException as error:
                    raise self._error(f"producing to topic {stream!r}", error) from None
        wait_ms = max(self.settings.timeout_ms, self.settings.read_timeout_ms)
        remaining = producer.flush(wait_ms / 1000)
        if remaining:
            refused = self._refusal(f"producing to topic {stream!r}")
            if refused is not None:
                raise refused
            raise StreamError(
                f"Kafka topic {stream!r} on {self.brokers}: {remaining} records were not acknowledged within "
                f"{wait_ms} ms"
            )
        if errors:
            raise StreamError(f"Kafka topic {stream!r} on {self.brokers}: {len(errors)} records failed: {errors[0]}")
        return [p for p in placed if p is not None]

    def close(self) -> None:
        with self._lock:
            for consumer in [*self._consumers, *self._committers.values()]:
                consumer.close()
            self._consumers.clear()
            self._committers.clear()
            if self._producer is not None:
                self._producer.flush(self._timeout_s)
                self._producer = None
            self._admin = None
        self._local = threading.local()

    # ---------------------------------------------------------------- errors

    def _error(self, doing: str, error: KafkaException) -> StreamError:
        err = error.args[0] if error.args and isinstance(error.args[0], KafkaError) else None
        code = err.code() if err is not None else None
        reason = err.str() if err is not None else str(error)
        refused = self._refusal(doing)
        if refused is not None:
            return refused
        if code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
            return StreamError(
                f"Kafka brokers {self.brokers} did not answer within {self.settings.timeout_ms} ms while {doing}: "
                f"{reason}; check systems.kafka.bootstrap_servers, the network and that the cluster is up"
            )
        if code in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            KafkaError.SASL_AUTHENTICATION_FAILED,
            KafkaError._AUTHENTICATION,
        ):
            return StreamError(
                f"Kafka brokers {self.brokers} refused {doing}: {reason}; check the credentials "
                "(systems.kafka.secrets_env / connection_id) and the ACLs of the topic and group"
            )
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return StreamError(f"Kafka brokers {self.brokers}: {doing} failed, the topic does not exist ({reason})")
        return StreamError(f"Kafka brokers {self.brokers}: {doing} failed: {reason}")

    def _topic_error(self, stream: str, error: KafkaError) -> StreamError:
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return StreamError(
                f"Kafka topic {stream!r} does not exist on {self.brokers}; create it (or check the name and the "
                "cluster the job points at)"
            )
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return StreamError(
                f"not authorized to describe Kafka topic {stream!r} on {self.brokers}; check the credentials "
                "(systems.kafka.secrets_env / connection_id) and the topic's ACLs"
            )
        return StreamError(f"Kafka topic {stream!r} on {self.brokers}: {error.str()}")

    def _read_error(self, stream: str, partition: int, first: int, error: KafkaError) -> StreamError:
        if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            return StreamError(
                f"Kafka topic {stream!r} partition {partition} on {self.brokers} no longer holds offset {first} "
                f"(retention or compaction removed it): {error.str()}; the records between are lost to this job"
            )
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return self._topic_error(stream, error)
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return self._topic_error(stream, error)
        return StreamError(f"Kafka topic {stream!r} partition {partition} on {self.brokers}: {error.str()}")


class _Rows:
    """Records of one read, gathered column by column (cheaper than a row list turned into a table)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.offsets: list[str] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes] = []
        self.timestamps: list[int] = []
        self.headers: list[str | None] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, msg: Any) -> None:
        key, value = msg.key(), msg.value()
        self.offsets.append(str(msg.offset()))
        self.keys.append(key)
        self.values.append(value if value is not None else b"")  # a tombstone's null value reads as empty
        self.timestamps.append(msg.timestamp()[1] * 1000)
        headers = msg.headers()
        self.headers.append(
            None
            if headers is None
            else json.dumps(
                {k: (v or b"").decode("utf-8", "replace") for k, v in headers},
                separators=(",", ":"),
                ensure_ascii=False,
            )
        )
        self.bytes += len(value or b"") + len(key or b"")

    def table(self) -> pa.Table:
        n = len(self.offsets)
        return pa.Table.from_arrays(
            [
                pa.repeat(pa.scalar(self.partition, pa.int32()), n),
                pa.array(self.offsets, pa.string()),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
                pa.array(self.headers, pa.string()),
            ],
            schema=RECORD_SCHEMA,
        )


def _connection_properties(connection_id: str | None) -> dict[str, str]:
    """Client properties (with secrets) from an Airflow connection of the Kafka provider's type.

    The provider keeps the client configuration as a JSON object in the
    connection's extra. ``AIRFLOW_CONN_<ID>`` in JSON form is read directly,
    so Spark executors resolve it without Airflow installed.
    """
    if connection_id is None:
        return {}
    raw = os.environ.get(f"AIRFLOW_CONN_{connection_id.upper()}")
    extra: Any = None
    if raw is not None and raw.lstrip().startswith("{"):
        try:
            extra = json.loads(raw).get("extra")
        except (ValueError, AttributeError):
            raise ConfigError(f"AIRFLOW_CONN_{connection_id.upper()} is not a JSON connection") from None
        if isinstance(extra, str):
            extra = json.loads(extra or "{}")
    else:
        try:
            from airflow.sdk import BaseHook  # type: ignore[attr-defined]
        except ImportError:
            raise ConfigError(
                f"systems.kafka.connection_id {connection_id!r}: Airflow is not installed here and "
                f"AIRFLOW_CONN_{connection_id.upper()} is not set in JSON form"
            ) from None
        extra = BaseHook.get_connection(connection_id).extra_dejson
    if not isinstance(extra, Mapping):
        raise ConfigError(f"Airflow connection {connection_id!r}: its extra must be a JSON object of client properties")
    return {str(k): str(v) for k, v in extra.items() if k not in _OWNED}


def _looks_secret(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def _offset(position: Position) -> int:
    return parse_offset(SYSTEM, position)


def _validate_count(partitions: object) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"partition count must be a whole number >= 1, got {partitions!r}")
    return partitions
