"""Free ports for the local servers and the test harness: the one place that picks them.

Ports are picked by binding and held until all are chosen, so the ones handed
out together differ; they are released before the caller's server binds them
(a server that binds at once wins the small race on a test machine).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
BELOW_EPHEMERAL = 8000
"""How far below the kernel's ephemeral range ``below_ephemeral`` picks."""


def free_port(ip: str = LOOPBACK) -> int:
    """One port free on ``ip`` now."""
    return free_ports(1, ip)[0]


def free_ports(count: int, ip: str = LOOPBACK, *, also_free_at: int = 0, below_ephemeral: bool = False) -> list[int]:
    """``count`` distinct ports P free on ``ip``; with ``also_free_at``, P + that offset is free as well.

    ``below_ephemeral`` picks under the kernel's ephemeral range, for a server started again on its own ports:
    while it is down its clients reconnect many times a second, and any of their connections can take an
    ephemeral port as its local port (a restarted broker failed "Address already in use"). Where the range
    leaves no room below it, any free port is taken.
    """
    low = _ephemeral_low()
    pick = random.SystemRandom()
    below = below_ephemeral and low - BELOW_EPHEMERAL >= 1024
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        for _ in range(1000 * count):
            if len(chosen) == count:
                return chosen
            port = _hold(held, ip, pick.randrange(low - BELOW_EPHEMERAL, low) if below else 0)
            if port is None:
                continue
            if also_free_at and (port + also_free_at > 65535 or _hold(held, ip, port + also_free_at) is None):
                continue
            chosen.append(port)
        if len(chosen) == count:
            return chosen
    finally:
        for s in held:
            s.close()
    if below:  # the range below is crowded: any free port, as on a machine without room below the range
        return free_ports(count, ip, also_free_at=also_free_at)
    raise OSError(f"no {count} free ports on {ip}")


def _hold(held: list[socket.socket], ip: str, port: int) -> int | None:
    """Bind ``port`` (0: any) on ``ip`` and keep the socket in ``held``; None when it is taken."""
    s = socket.socket()
    try:
        s.bind((ip, port))
    except OSError:
        s.close()
        return None
    held.append(s)
    return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
