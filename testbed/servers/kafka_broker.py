"""A real Apache Kafka broker (one KRaft node) on 127.0.0.1, for the tests, the demo and the benchmarks.

It runs the jars ``jvm/kafka/pom.xml`` pins, which ``scripts/setup.sh`` copies
into ``.jvm/kafka/``: the storage tool formats a fresh log directory, then
``kafka.Kafka`` runs as broker and controller in one JVM with a small heap
(this is a 2-core test machine, not a production broker). Every listener is on
127.0.0.1 on a free port: PLAINTEXT for clients, CONTROLLER for the node's own
quorum, and, when users are given, SASL_PLAINTEXT with the PLAIN mechanism.
With users, the broker also enforces ACLs (``StandardAuthorizer``): PLAINTEXT
clients (principal ``ANONYMOUS``) are super users, a SASL user may use only
what ``grant`` gave it, so a refused topic is Kafka's own refusal.

The broker runs in a process group of its own: ``stop()`` ends the group (and
an ``atexit`` hook does if its owner forgets; the kernel kills the JVM if its
owner dies without either, ``lifetime.tied_command``), ``restart()`` starts it again on
the same ports with the same data, which is what a broker outage looks like to
clients. ``close()`` also removes a log directory the broker made itself.

Kafka's own command-line tools run from the same jars: ``consumer_groups``
runs ``kafka-consumer-groups --describe`` and parses its table.

Run one by hand with ``python -m testbed.servers.kafka_broker [--sasl-user NAME:PASSWORD]``
(prints the bootstrap addresses; Ctrl-C stops it).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import concurrent.futures
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # no 'as' re-export in its __init__
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pipelines.runtime.lifetime import tied_command
from pipelines.usage import Parser
from testbed.ports import free_ports

HOST = "127.0.0.1"
JARS = Path(__file__).resolve().parents[2] / ".jvm" / "kafka"
JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",  # C1 only: a test broker starts sooner and never runs long enough for C2 to pay
    "-XX:+UseSerialGC",  # 2 cores: no parallel GC threads competing with Spark
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
STORAGE_TOOL = "kafka.tools.StorageTool"  # Kafka 4.1 keeps it in the core (Scala) jar
CONSUMER_GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# Warnings and the "started" line onto stderr: the broker's goes to broker.log, a tool's stdout stays its table.
_LOG4J = """\
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_ERR
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


ALLOW = AclPermissionType.ALLOW
_QUIET = logging.getLogger(__name__ + ".client")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class BrokerError(RuntimeError):
    """The broker did not start, stopped by itself, or a tool failed: the message carries the broker log's tail."""


@dataclass(frozen=True)
class GroupOffset:
    """One row of ``kafka-consumer-groups --describe``: ``None`` where the tool prints ``-``."""

    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None


class KafkaBroker:
    """One single-node KRaft cluster; ``bootstrap`` is the PLAINTEXT address, ``sasl_bootstrap`` the SASL one."""

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        sasl_users: Mapping[str, str] | None = None,
        partitions: int = 2,
        heap_mb: int = 256,
        start_timeout_s: float = 120.0,
    ) -> None:
        if not (JARS / ".pom.sha").exists():
            raise BrokerError(f"the Kafka jars are not in {JARS}: run scripts/setup.sh (it fetches jvm/kafka/pom.xml)")
        self._own_dir = data_dir is None
        self.root = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kafka-broker-"))
        self.sasl_users = dict(sasl_users or {})
        self.partitions = partitions
        self.heap_mb = heap_mb
        self.start_timeout_s = start_timeout_s
        ports = free_ports(3, HOST, below_ephemeral=True)  # a restart binds them again
        self.port, self.controller_port, self.sasl_port = ports
        self.bootstrap = f"{HOST}:{self.port}"
        self.sasl_bootstrap = f"{HOST}:{self.sasl_port}" if self.sasl_users else None
        self.process: subprocess.Popen[bytes] | None = None
        self._formatted = False
        self.formatted_in_s: float | None = None  # the storage tool's run, part of the first start
        self.started_in_s: float | None = None  # the last start, from its call to an answered metadata request
        atexit.register(self.close)

    # ----------------------------------------------------------- lifecycle

    def start(self) -> KafkaBroker:
        """Format the log directory (first start only), launch the JVM, return once it answers metadata requests."""
        if self.process is not None and self.process.poll() is None:
            return self
        began = time.monotonic()
        if not self._formatted:
            self._write_config()
            self._run_java(
                STORAGE_TOOL,
                ["format", "--cluster-id", _cluster_id(), "--config", str(self._config), "--ignore-formatted"],
                heap_mb=64,
            )
            self._formatted = True
            self.formatted_in_s = time.monotonic() - began
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child writes it for its whole life
        try:
            self.process = subprocess.Popen(
                tied_command([*self._java(self.heap_mb), "kafka.Kafka", str(self._config)]),  # dies with its starter
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() ends the JVM and anything it started
                cwd=self.root,
            )
        finally:
            log.close()
        self._wait_ready(began)
        self.started_in_s = time.monotonic() - began
        return self

    def stop(self, timeout_s: float = 20.0) -> None:
        """End the broker's process group: SIGTERM (a controlled shutdown), SIGKILL after ``timeout_s``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()

    def kill(self) -> None:
        """End the broker at once (SIGKILL to its group), as a crash would."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGKILL)
            process.wait()

    def restart(self, down_s: float = 0.0) -> None:
        """Stop, stay down ``down_s`` seconds, start again on the same ports with the same data."""
        self.stop()
        if down_s > 0:
            time.sleep(down_s)
        self.start()

    def close(self) -> None:
        """Kill the broker and remove the log directory if this object made it."""
        self.kill()
        if self._own_dir and self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.close)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -------------------------------------------------------------- admin

    def admin(self) -> AdminClient:
        """An admin client on the PLAINTEXT listener; its connection-refused logs (while starting) go nowhere."""
        return AdminClient({"bootstrap.servers": self.bootstrap}, logger=_QUIET)

    def create_topic(self, topic: str, partitions: int) -> None:
        """A topic of ``partitions`` partitions, once the broker reports all of them (CreateTopics)."""
        admin = self.admin()  # kept until the answer: a collected client cancels its requests
        _result(admin.create_topics([NewTopic(topic, partitions, replication_factor=1)], request_timeout=30))
        self._wait_partitions(topic, partitions)

    def create_partitions(self, topic: str, total: int) -> None:
        """Grow a live topic to ``total`` partitions (CreatePartitions), as ``kafka-topics --alter`` does."""
        admin = self.admin()
        _result(admin.create_partitions([NewPartitions(topic, total)], request_timeout=30))
        self._wait_partitions(topic, total)

    def delete_topic(self, topic: str) -> None:
        admin = self.admin()
        _result(admin.delete_topics([topic], request_timeout=30))

    def grant(self, user: str, prefix: str) -> None:
        """Let a SASL ``user`` do anything with topics and consumer groups whose names start with ``prefix``."""
        admin = self.admin()
        bindings = [
            AclBinding(kind, prefix, ResourcePatternType.PREFIXED, f"User:{user}", "*", AclOperation.ALL, ALLOW)
            for kind in (ResourceType.TOPIC, ResourceType.GROUP)
        ]
        deadline = time.monotonic() + 60.0
        while True:  # a broker that just answered metadata may not have its authorizer ready yet
            try:
                _result(admin.create_acls(bindings, request_timeout=30))
                return
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def consumer_groups(self, group: str) -> list[GroupOffset]:
        """``kafka-consumer-groups --describe --group <group>``, Kafka's own tool, its table parsed."""
        out = self._run_java(
            CONSUMER_GROUPS_TOOL, ["--bootstrap-server", self.bootstrap, "--describe", "--group", group], heap_mb=128
        )
        return parse_group_describe(out)

    # ------------------------------------------------------------ plumbing

    @property
    def log_path(self) -> Path:
        return self.root / "broker.log"

    @property
    def _config(self) -> Path:
        return self.root / "server.properties"

    def _write_config(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        listeners = {"PLAINTEXT": self.port, "CONTROLLER": self.controller_port}
        if self.sasl_users:
            listeners["SASL_PLAINTEXT"] = self.sasl_port
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": ",".join(f"{name}://{HOST}:{port}" for name, port in listeners.items()),
            "advertised.listeners": ",".join(
                f"{name}://{HOST}:{port}" for name, port in listeners.items() if name != "CONTROLLER"
            ),
            "listener.security.protocol.map": ",".join(f"{name}:{name}" for name in listeners).replace(
                "CONTROLLER:CONTROLLER", "CONTROLLER:PLAINTEXT"
            ),
            "log.dirs": str(self.root / "data"),
            "num.partitions": str(self.partitions),
            "auto.create.topics.enable": "false",  # a misspelled topic is an error, as on docker-compose's broker
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",  # the first commit creates it: 4 partitions, not 50
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.ms": "-1",  # tests and the demo re-read old offsets: nothing expires
            "log.retention.bytes": "-1",
            "log.cleaner.dedupe.buffer.size": str(8 << 20),  # the default 128 MB would not fit the small heap
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
        }
        if self.sasl_users:
            users = " ".join(f'user_{name}="{password}"' for name, password in self.sasl_users.items())
            props["sasl.enabled.mechanisms"] = "PLAIN"
            props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            props["super.users"] = "User:ANONYMOUS"  # the PLAINTEXT and CONTROLLER listeners
            props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            )
        self._config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.root / "log4j2.properties").write_text(_LOG4J)

    def _java(self, heap_mb: int) -> list[str]:
        return [
            _java_binary(),
            f"-Xmx{heap_mb}m",
            f"-Xms{min(heap_mb, 64)}m",
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
            "-cp",
            str(JARS / "*"),
        ]

    def _run_java(self, main_class: str, args: Sequence[str], heap_mb: int) -> str:
        """One of Kafka's tools to completion; its stdout, or a ``BrokerError`` with its output."""
        self.root.mkdir(parents=True, exist_ok=True)
        if not (self.root / "log4j2.properties").exists():
            (self.root / "log4j2.properties").write_text(_LOG4J)
        done = subprocess.run(
            [*self._java(heap_mb), main_class, *args], capture_output=True, text=True, timeout=120, cwd=self.root
        )
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[-2000:]
            raise BrokerError(f"{main_class} {' '.join(args)} exited {done.returncode}: {said}")
        return done.stdout

    def _wait_ready(self, began: float) -> None:
        """Poll a metadata request (AdminClient.list_topics) until it is answered, or the JVM ends."""
        admin = self.admin()
        deadline = began + self.start_timeout_s
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                code, self.process = self.process.returncode, None
                raise BrokerError(f"the Kafka broker exited {code} while starting:\n{self._log_tail()}")
            try:
                admin.list_topics(timeout=0.5)
                return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerError(
                    f"the Kafka broker did not answer on {self.bootstrap} within {self.start_timeout_s:.0f} s:\n"
                    f"{self._log_tail()}"
                )
            time.sleep(0.1)

    def _wait_partitions(self, topic: str, count: int, timeout_s: float = 30.0) -> None:
        admin = self.admin()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            if found is not None and found.error is None and len(found.partitions) == count:
                return
            time.sleep(0.05)
        raise BrokerError(f"topic {topic!r} did not show {count} partitions within {timeout_s:.0f} s")

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no broker log)"


def parse_group_describe(text: str) -> list[GroupOffset]:
    """The rows of ``kafka-consumer-groups --describe``'s table (it prints a note line first for idle groups)."""
    rows: list[GroupOffset] = []
    header: list[str] | None = None
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "GROUP" and "PARTITION" in words:
            header = words
            continue
        if header is None or len(words) < 6:
            continue
        cell = dict(zip(header, words, strict=False))

        def number(column: str, cell: dict[str, str] = cell) -> int | None:
            value = cell.get(column, "-")
            return None if value == "-" else int(value)

        rows.append(
            GroupOffset(
                group=cell["GROUP"],
                topic=cell["TOPIC"],
                partition=int(cell["PARTITION"]),
                current_offset=number("CURRENT-OFFSET"),
                log_end_offset=number("LOG-END-OFFSET"),
                lag=number("LAG"),
            )
        )
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def _result(futures: Mapping[Any, concurrent.futures.Future[Any]]) -> None:
    for future in futures.values():
        future.result()


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64 without padding (what ``random-uuid`` prints).

    Never one starting with ``-``, as Kafka's own ``Uuid.randomUuid`` redraws: ``kafka-storage format
    --cluster-id -X6h...`` reads it as an option and refuses to start (1 broker start in 64 failed so).
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerError("java is not installed: run scripts/setup.sh (it installs Java 17)")
    return found


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended by itself
        os.killpg(process.pid, sig)


def _sasl_user(text: str) -> tuple[str, str]:
    name, colon, password = text.partition(":")
    if not colon or not name or not password:
        raise argparse.ArgumentTypeError(f"must be NAME:PASSWORD, got {text!r}")
    return name, password


def _topic(text: str) -> tuple[str, int]:
    name, colon, count = text.rpartition(":")
    if not colon or not name or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"must be NAME:PARTITIONS with PARTITIONS a whole number >= 1, got {text!r}")
    return name, int(count)


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m testbed.servers.kafka_broker", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sasl-user", type=_sasl_user, action="append", default=[], help="NAME:PASSWORD for the SASL/PLAIN listener"
    )
    parser.add_argument("--topic", type=_topic, action="append", default=[], help="NAME:PARTITIONS, created at start")
    args = parser.parse_args(argv)  # before a broker starts: bad input starts nothing
    with KafkaBroker(sasl_users=dict(args.sasl_user)) as broker:
        for name, partitions in args.topic:
            broker.create_topic(name, partitions)
        print(f"bootstrap {broker.bootstrap}", flush=True)
        if broker.sasl_bootstrap:
            print(f"sasl_bootstrap {broker.sasl_bootstrap} (SASL_PLAINTEXT, PLAIN)", flush=True)
        print(f"started in {broker.started_in_s:.1f} s; Ctrl-C stops it", flush=True)
        try:
            while broker.running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
