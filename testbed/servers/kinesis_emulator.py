"""kinesis-mock, the Kinesis emulator the tests and the demo run: start it on the loopback interface, stop it.

``scripts/setup.sh`` installs it (npm package ``kinesis-local``, pinned in
``tools/kinesis-mock/package-lock.json``) into ``tools/kinesis-mock``; set
``KINESIS_MOCK_DIR`` to use another install. It is started as
``node -r bind-host.js main.js`` from the package folder: kinesis-mock always
listens on all interfaces, and ``bind-host.js`` makes it listen on 127.0.0.1.
Its TLS port is turned off (port 0); the plain HTTP port is picked free.

It is killed, not terminated: it takes 30 s to honour SIGTERM. It also dies
with the process that started it, even one killed by ``kill -9``
(``lifetime.tied_command``).

What it gets wrong (docs/systems/kinesis.md): a closed shard's EndingSequenceNumber, so
``KinesisSystem`` detects a shard's end by ``NextShardIterator`` None; and it
never throttles, so the throttling path is tested with botocore's Stubber.

Run it by hand with ``python -m testbed.servers.kinesis_emulator`` (prints the endpoint, Ctrl-C stops it).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from pipelines.errors import ConfigError
from pipelines.runtime.lifetime import tied_command
from pipelines.usage import Parser
from testbed.ports import free_port

_REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


def install_dir() -> Path:
    """Where the emulator is installed: ``KINESIS_MOCK_DIR`` or the repository's ``tools/kinesis-mock``."""
    return Path(os.environ.get("KINESIS_MOCK_DIR") or _REPO / "tools" / "kinesis-mock")


def _require_free(port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as node binds: a closed port's TIME_WAIT is free
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise ConfigError(f"port {port} on {HOST} is not free for kinesis-mock: {e.strerror}") from None


class KinesisEmulator:
    """One kinesis-mock process; ``with KinesisEmulator() as endpoint_url: ...``."""

    def __init__(self, port: int | None = None, startup_timeout_s: float = 60.0) -> None:
        self.port = port or free_port(HOST)
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> str:
        root = install_dir()
        package = root / "node_modules" / "kinesis-local"
        if not (package / "main.js").exists():
            raise ConfigError(
                f"kinesis-mock is not installed in {root}: run scripts/setup.sh (npm ci there), "
                "or point KINESIS_MOCK_DIR at an install"
            )
        _require_free(self.port)  # else the readiness check below would take another server's answer for its own
        env = {
            **os.environ,
            "KINESIS_MOCK_PLAIN_PORT": str(self.port),
            "KINESIS_MOCK_TLS_PORT": "0",
            "KINESIS_MOCK_CERT_PATH": str(package / "server.json"),
            "KINESIS_MOCK_HOST": HOST,
            # Reshards and stream creation take effect at once instead of after 500 ms.
            "CREATE_STREAM_DURATION": "0ms",
            "DELETE_STREAM_DURATION": "0ms",
            "UPDATE_SHARD_COUNT_DURATION": "0ms",
            "SPLIT_SHARD_DURATION": "0ms",
            "MERGE_SHARDS_DURATION": "0ms",
            "LOG_LEVEL": os.environ.get("KINESIS_MOCK_LOG_LEVEL", "WARN"),
        }
        self.process = subprocess.Popen(
            tied_command(["node", "-r", str(root / "bind-host.js"), "main.js"]),  # dies with its starter
            cwd=package,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise ConfigError(f"kinesis-mock exited with {self.process.returncode}: {err[-2000:]}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.2):
                    return self.endpoint_url
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ConfigError(f"kinesis-mock did not listen on {self.endpoint_url} within {self.startup_timeout_s} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session: node and nothing else of ours
            self.process.wait(timeout=10)
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to 65535, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.servers.kinesis_emulator [PORT]``: kinesis-mock on 127.0.0.1 until Ctrl-C."""
    parser = Parser(prog="python -m testbed.servers.kinesis_emulator", description=main.__doc__)
    parser.add_argument("port", nargs="?", type=_port, help="the port to listen on (default: a free one)")
    args = parser.parse_args(argv)
    emulator = KinesisEmulator(args.port)
    try:
        print(emulator.start(), flush=True)
        while emulator.process is not None and emulator.process.poll() is None:
            time.sleep(1)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
