"""The object store of the test hosts: ``python -m testbed.servers.s3`` run in a host, bound to its address.

The server is a process of that host (``Host.run``), so it dies with it; its
data lives in the host's private ``/tmp``. What the other hosts need to reach
it is what the server prints, the standard AWS variables, which every process
of the cluster gets in its environment, as a real deployment configures S3.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from testbed.hosts import HOST_TMP, Host, HostProcess

START_TIMEOUT_S = 120.0  # weed mini's several servers, on a loaded 2-core machine
DATA_DIR = str(HOST_TMP / "s3")  # in the store host's own /tmp


@dataclass(frozen=True)
class StoreHost:
    """The running store: its host, its process and the AWS variables that reach it from any host."""

    host: Host
    proc: HostProcess
    env: dict[str, str]

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (``bucket-<random>`` when unnamed) through the store's own S3 API, from its host."""
        name = name or f"bucket-{secrets.token_hex(6)}"
        code = "import sys; from testbed.servers.s3 import S3Server as S; "
        code += "S(*sys.argv[1:5]).create_bucket(sys.argv[5])"
        keys = [self.env[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")]
        done = self.host.python(code, *keys, name, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"bucket {name} not created: {done.stderr.strip()[-2000:]}")
        return name


@contextlib.contextmanager
def start_store(host: Host, timeout: float = START_TIMEOUT_S) -> Iterator[StoreHost]:
    """Start the S3 server in ``host`` on ``host.ip``; yield once it serves; stop it (SIGTERM, then the kill)."""
    cmd = [sys.executable, "-m", "testbed.servers.s3", "--dir", DATA_DIR, "--ip", host.ip]
    proc = host.run(cmd, {"PYTHONUNBUFFERED": "1"}, log_name="s3")
    try:
        env = _wait_for_exports(proc, timeout)
        yield StoreHost(host, proc, env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_exports(proc: HostProcess, timeout: float) -> dict[str, str]:
    """The ``export NAME=value`` lines the server prints once it answers signed requests."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = proc.log_path.read_text(errors="replace")
        if "# serving" in text:
            lines = [line.removeprefix("export ") for line in text.splitlines() if line.startswith("export ")]
            return dict(line.split("=", 1) for line in lines)
        if proc.poll() is not None:
            raise RuntimeError(f"the S3 server exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"the S3 server did not serve within {timeout:.0f} s:\n{proc.log_path.read_text()[-3000:]}")
