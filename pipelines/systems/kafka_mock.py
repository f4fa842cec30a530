"""A local Kafka-protocol broker for tests and the demo: librdkafka's mock cluster, in a process of its own.

No Apache Kafka broker can be installed here (no Maven, no Docker), but the
librdkafka bundled in the ``confluent-kafka`` wheel carries a mock cluster
that speaks the Kafka protocol on real sockets with correct offsets,
watermarks, seeks, consumer groups and transactions. Two things need a
helper process:

* the mock cluster lives inside the librdkafka handle that created it, and
  Spark's Python workers are other processes: they must find a broker that
  outlives any one client, on a fixed ``127.0.0.1`` address;
* the mock answers no ``CreateTopics`` request, and ``rd_kafka_mock_topic_create``
  (topics of N partitions) is not exposed by ``confluent_kafka``; this module
  reaches it, and ``rd_kafka_mock_broker_set_down``/``_up`` (a broker outage),
  through ``ctypes`` on that same bundled library.

Run it as ``python -m pipelines.systems.kafka_mock [--brokers N] [--topic NAME:PARTITIONS ...]``:
it prints ``bootstrap <host:port,...>`` and then reads commands, one a line,
on stdin (``create <topic> <partitions>``, ``delete <topic>``, ``topic-error <topic> <kafka error code>``,
``down``, ``up``, ``quit``),
answering ``ok`` or ``error <reason>``. ``MockKafka`` drives it from Python.
It ends when stdin closes, so it never outlives whoever started it.

What the mock cannot do (and so what tests cannot show against it): add
partitions to a topic (no ``CreatePartitions``), create topics by request,
enforce ACLs or authentication. Use a real cluster (``docker-compose.yaml``'s
Kafka service) for those.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

_RD_KAFKA_PRODUCER = 0


def _library() -> ctypes.CDLL:
    """The librdkafka the ``confluent_kafka`` wheel bundles (a system librdkafka may lack the mock symbols)."""
    import confluent_kafka

    package = Path(confluent_kafka.__file__).parent
    candidates = sorted(glob.glob(str(package.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    candidates += sorted(glob.glob(str(package / ".dylibs" / "librdkafka*.dylib")))
    candidates.append("librdkafka.so.1")
    errors = []
    for candidate in candidates:
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as error:
            errors.append(f"{candidate}: {error}")
            continue
        if hasattr(lib, "rd_kafka_mock_topic_create"):
            return lib
    raise RuntimeError("no librdkafka with the mock cluster found: " + "; ".join(errors or candidates))


class _Cluster:
    """The mock cluster, owned by one producer handle of this process."""

    def __init__(self, brokers: int) -> None:
        lib = self.lib = _library()
        lib.rd_kafka_conf_new.restype = ctypes.c_void_p
        lib.rd_kafka_conf_set.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        lib.rd_kafka_conf_set.restype = ctypes.c_int
        lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_new.restype = ctypes.c_void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
        for name in ("rd_kafka_mock_broker_set_down", "rd_kafka_mock_broker_set_up"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_int32]
            getattr(lib, name).restype = ctypes.c_int
        lib.rd_kafka_mock_topic_delete.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.rd_kafka_mock_topic_delete.restype = ctypes.c_int
        lib.rd_kafka_mock_topic_set_error.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.rd_kafka_mock_topic_set_error.restype = None
        lib.rd_kafka_err2str.argtypes = [ctypes.c_int]
        lib.rd_kafka_err2str.restype = ctypes.c_char_p

        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # The handle only hosts the cluster: it must not try to reach a broker of its own.
        if lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, 512) != 0:
            raise RuntimeError(errstr.value.decode())
        self.rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, 512)
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self.brokers = brokers
        self.cluster = lib.rd_kafka_mock_cluster_new(self.rk, brokers)
        if not self.cluster:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self.cluster).decode()

    def create(self, topic: str, partitions: int) -> None:
        err = self.lib.rd_kafka_mock_topic_create(self.cluster, topic.encode(), partitions, min(3, self.brokers))
        if err:
            raise RuntimeError(self.lib.rd_kafka_err2str(err).decode())

    def delete(self, topic: str) -> None:
        err = self.lib.rd_kafka_mock_topic_delete(self.cluster, topic.encode())
        if err:
            raise RuntimeError(self.lib.rd_kafka_err2str(err).decode())

    def topic_error(self, topic: str, code: int) -> None:
        """Make the topic's metadata answer carry a Kafka error code (e.g. 29, TOPIC_AUTHORIZATION_FAILED)."""
        self.lib.rd_kafka_mock_topic_set_error(self.cluster, topic.encode(), code)

    def set_down(self, down: bool) -> None:
        call = self.lib.rd_kafka_mock_broker_set_down if down else self.lib.rd_kafka_mock_broker_set_up
        for broker in range(1, self.brokers + 1):
            err = call(self.cluster, broker)
            if err:
                raise RuntimeError(self.lib.rd_kafka_err2str(err).decode())


def serve(brokers: int, topics: list[str], stdin: IO[str], stdout: IO[str]) -> None:
    cluster = _Cluster(brokers)
    for spec in topics:
        name, _, count = spec.rpartition(":")
        cluster.create(name, int(count))
    print(f"bootstrap {cluster.bootstrap}", file=stdout, flush=True)
    for line in stdin:
        words = line.split()
        try:
            if not words:
                continue
            if words[0] == "create" and len(words) == 3:
                cluster.create(words[1], int(words[2]))
            elif words[0] == "delete" and len(words) == 2:
                cluster.delete(words[1])
            elif words[0] == "topic-error" and len(words) == 3:
                cluster.topic_error(words[1], int(words[2]))
            elif words[0] in ("down", "up") and len(words) == 1:
                cluster.set_down(words[0] == "down")
            elif words[0] == "quit":
                break
            else:
                raise ValueError(f"unknown command {line.strip()!r}")
        except (RuntimeError, ValueError) as error:
            print(f"error {error}", file=stdout, flush=True)
            continue
        print("ok", file=stdout, flush=True)
    # Exiting the process ends the cluster; librdkafka's destroy would wait for its own broker threads.
    os._exit(0)


class MockKafka:
    """A mock cluster in a child process; ``bootstrap`` is what clients (and Spark's workers) connect to."""

    def __init__(self, brokers: int = 1, topics: dict[str, int] | None = None, start_timeout_s: float = 30.0) -> None:
        args = [sys.executable, "-m", "pipelines.systems.kafka_mock", "--brokers", str(brokers)]
        for name, count in (topics or {}).items():
            args += ["--topic", f"{name}:{count}"]
        self.process = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, cwd=_repo_root()
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + start_timeout_s
        line = self.process.stdout.readline()
        if not line.startswith("bootstrap ") or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"the mock Kafka cluster did not start: {line!r}")
        self.bootstrap = line.split()[1]

    def _command(self, line: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"mock Kafka {line!r}: {answer or 'no answer (process ended)'}")

    def create_topic(self, topic: str, partitions: int) -> None:
        self._command(f"create {topic} {partitions}")

    def delete_topic(self, topic: str) -> None:
        self._command(f"delete {topic}")

    def recreate_topic(self, topic: str, partitions: int) -> None:
        """Delete and create again with another count: how a grown topic looks to a job (the mock cannot grow one)."""
        self.delete_topic(topic)
        self.create_topic(topic, partitions)

    def topic_error(self, topic: str, code: int) -> None:
        """Answer metadata requests for ``topic`` with a Kafka error code (0 clears it), e.g. an ACL refusal."""
        self._command(f"topic-error {topic} {code}")

    def set_down(self, down: bool = True) -> None:
        """Take every broker down (connections refused) or bring them back, keeping topics and offsets."""
        self._command("down" if down else "up")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> MockKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--topic", action="append", default=[], help="NAME:PARTITIONS, created at start")
    args = parser.parse_args(argv)
    serve(args.brokers, args.topic, sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
