"""A server started by the project dies with the process that started it, even when that process is killed.

``python -m testbed.servers.s3`` or ``.kinesis_emulator`` killed with ``kill -9`` (a closed terminal, a test
worker ended by its controller) used to leave ``weed`` or ``node`` running in a session of its own, holding
ports and CPU until someone found it. The Kafka broker starts its JVM the same way (``lifetime.tied_command``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from testbed.servers.s3 import running_s3

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("module", "args", "program"),
    [("testbed.servers.s3", ["--dir", "{tmp}"], "weed"), ("testbed.servers.kinesis_emulator", [], "node")],
    ids=["s3", "kinesis"],
)
def test_a_server_dies_with_its_killed_starter(module: str, args: list[str], program: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", module, *(a.format(tmp=tmp_path / "data") for a in args)]
    starter = subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True
    )
    servers: list[psutil.Process] = []
    sockets: set[Path] = set()  # what a server killed with its starter cannot remove (SeaweedFS's, in /tmp)
    try:
        first = starter.stdout.readline()  # type: ignore[union-attr]  # printed once the server answers
        assert first, f"{module} printed nothing; exit code {starter.poll()}"
        servers = [p for p in psutil.Process(starter.pid).children() if p.name() == program]
        assert len(servers) == 1, psutil.Process(starter.pid).children()
        sockets = {Path(c.laddr) for c in servers[0].net_connections("unix") if c.laddr}
        starter.kill()
        starter.wait()
        _, alive = psutil.wait_procs(servers, timeout=10)
        assert not alive, f"{program} outlived its killed starter: {alive}"
    finally:
        starter.kill()
        for server in servers:
            if server.is_running():
                server.kill()
        for path in sockets:
            path.unlink(missing_ok=True)


def test_a_stopped_store_leaves_none_of_its_local_sockets_behind(tmp_path: Path) -> None:
    """SeaweedFS puts its servers' local sockets in /tmp whatever ``TMPDIR`` says, and left the S3 and admin
    ones after each stop: six files a store, four hundred after a day of test runs."""
    with running_s3(tmp_path / "s3") as server:
        weed = psutil.Process(server.pgid)
        sockets = {Path(c.laddr) for p in [weed, *weed.children(recursive=True)] for c in p.net_connections("unix")}
        listening = {s for s in sockets if s.name.startswith("seaweedfs-")}
        assert listening, f"weed listens on no local socket: {sockets}"
    assert not [s for s in listening if s.exists()]


def test_the_brokers_ports_lie_below_the_ephemeral_range_so_a_restart_finds_them_free() -> None:
    """A broker restarted on its ports failed to bind its controller port once (a whole-suite run): while it was
    down, the port, picked by the kernel from the ephemeral range, had become some connection's local port."""
    from testbed import ports as free

    low = free._ephemeral_low()
    ports = free.free_ports(3, below_ephemeral=True)
    assert len(set(ports)) == 3
    assert all(1024 <= port < low for port in ports), (ports, low)
