"""The Kafka clients of one process, and what their failures mean to the user.

Clients are made on first use and live per process (a pickled system carries
only its settings): one admin client, one reading consumer per thread, one
idempotent producer, one committing consumer per group. Every client gets
the same properties, secrets resolved here (``credentials``). librdkafka logs
through Python's logging (``pipelines.systems.kafka.librdkafka``), not raw
onto stderr, and its error callback notes an authentication refusal, so it
is reported as one rather than as brokers that "did not answer" (librdkafka
retries a refused login until the request times out). The error texts name
the setting to check. See docs/systems/kafka.md.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from pipelines.errors import StreamError
from pipelines.systems.kafka.credentials import secret_properties
from pipelines.systems.kafka.settings import KafkaSettings

_REFUSALS = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL)
"""Client errors that mean the brokers answer but refuse us: retrying cannot help, the user must act."""
_UNANSWERED = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE)
"""Client errors that mean the brokers did not answer in time: down, unreachable, or a client stuck on them."""
_CLIENT_LOG = logging.getLogger("pipelines.systems.kafka.librdkafka")
_CLIENT_LOG.addHandler(logging.NullHandler())  # shown where the application configures logging, never raw on stderr


class KafkaClients:
    """One process's clients of one cluster, and the translation of their errors into ``StreamError``."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.brokers = settings.bootstrap_servers
        self._lock = threading.Lock()
        self._local = threading.local()
        self._consumers: list[Consumer] = []
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._committers: dict[str, Consumer] = {}
        self._client_conf: dict[str, Any] | None = None
        self.refused: str | None = None  # the brokers' last authentication refusal, from any client's error_cb

    @property
    def timeout_s(self) -> float:
        return self.settings.timeout_ms / 1000

    def conf(self) -> dict[str, Any]:
        """Properties every client gets: bootstrap servers, the job's properties, secrets resolved here."""
        if self._client_conf is None:
            conf: dict[str, Any] = {
                "bootstrap.servers": self.brokers,
                **self.settings.properties,
                "error_cb": self._client_error,
                "logger": _CLIENT_LOG,
            }
            conf.update(secret_properties(self.settings))
            conf["bootstrap.servers"] = self.brokers
            self._client_conf = conf
        return dict(self._client_conf)

    def admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                # Describing a topic must never create it (brokers auto-create on metadata requests by default).
                self._admin = AdminClient({**self.conf(), "allow.auto.create.topics": "false"})
            return self._admin

    def forget_admin(self) -> None:
        """The next admin request makes a new admin client, which bootstraps afresh.

        Called when the cluster did not answer one. librdkafka's admin client
        can stay "waiting for controller" after a broker restart: a job's
        identity check (``DescribeTopics``) failed that way through the 164 s a
        test waited after its broker was back (seen once in many runs). A new
        client learns the cluster from the brokers as they are now; a made-again
        client costs a connection, a stuck one stops the job until librdkafka
        refreshes its metadata (``topic.metadata.refresh.interval.ms``, 5 min).
        """
        with self._lock:
            self._admin = None

    def consumer(self) -> Consumer:
        """This thread's reading consumer: assigned partitions only, never a group member."""
        consumer = getattr(self._local, "consumer", None)
        if consumer is None:
            consumer = Consumer(
                {
                    **self.conf(),
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

    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(
                    {
                        "linger.ms": "5",
                        **self.conf(),
                        "partitioner": "murmur2_random",
                        "enable.idempotence": "true",
                    }
                )
            return self._producer

    def committer(self, group: str) -> Consumer:
        """The consumer that commits a group's offsets (never subscribes)."""
        committer = self._committers.get(group)
        if committer is None:
            committer = Consumer(
                {**self.conf(), "group.id": group, "enable.auto.commit": "false", "allow.auto.create.topics": "false"}
            )
            self._committers[group] = committer
        return committer

    def close(self) -> None:
        with self._lock:
            for consumer in [*self._consumers, *self._committers.values()]:
                consumer.close()
            self._consumers.clear()
            self._committers.clear()
            if self._producer is not None:
                self._producer.flush(self.timeout_s)
                self._producer = None
            self._admin = None
        self._local = threading.local()

    # ---------------------------------------------------------------- errors

    def _client_error(self, error: KafkaError) -> None:
        if error.code() in _REFUSALS:
            # "sasl_plaintext://host:port/bootstrap: SASL authentication error: ... (after 301ms in state AUTH_REQ)"
            reason = re.sub(r"^\S+://\S+: ", "", error.str())
            self.refused = re.sub(r" \(after \d+ms in state \w+\)$", "", reason)

    def refusal(self, doing: str) -> StreamError | None:
        """The brokers refused our credentials (seen by any client so far): the error to raise, else None."""
        if self._admin is not None:
            self._admin.poll(0)  # serves the admin client's error callbacks
        if self.refused is None:
            return None
        return StreamError(
            f"Kafka brokers {self.brokers} refused the connection while {doing}: {self.refused}; check "
            "systems.kafka.properties (security.protocol, sasl.mechanism, sasl.username, ssl.*) and the secrets in "
            "systems.kafka.secrets_env / connection_id"
        )

    def error(self, doing: str, error: KafkaException) -> StreamError:
        err = error.args[0] if error.args and isinstance(error.args[0], KafkaError) else None
        code = err.code() if err is not None else None
        reason = err.str() if err is not None else str(error)
        refused = self.refusal(doing)
        if refused is not None:
            return refused
        if code in _UNANSWERED:
            self.forget_admin()
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

    def topic_error(self, stream: str, error: KafkaError) -> StreamError:
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

    def read_error(self, stream: str, partition: int, first: int, error: KafkaError) -> StreamError:
        if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            return StreamError(
                f"Kafka topic {stream!r} partition {partition} on {self.brokers} no longer holds offset {first} "
                f"(retention or compaction removed it): {error.str()}; the records between are lost to this job"
            )
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return self.topic_error(stream, error)
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return self.topic_error(stream, error)
        return StreamError(f"Kafka topic {stream!r} partition {partition} on {self.brokers}: {error.str()}")
