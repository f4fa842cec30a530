"""Network probes run inside a test host (the hosts have no ``ping`` or ``nc``): ``python -I netcheck.py CMD ...``.

* ``ping IP`` — one ICMP echo over a raw socket; prints ``reply from IP`` or the error's name.
* ``connect IP PORT`` — a TCP connection; prints ``ok <first line the server sent>`` or the error's name
  (``ENETUNREACH``, ``ECONNREFUSED``, ``timeout``).
* ``serve IP PORT TOKEN`` — listen on IP:PORT, print ``listening``, answer every connection with TOKEN.

Standard library only. Errors are printed, not raised, so a test asserts on one line of output.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import sys
import time

TIMEOUT_S = 3.0


def ping(ip: str) -> str:
    ident = os.getpid() & 0xFFFF
    payload = b"elastic-pipelines"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
    packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, 1) + payload
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        sock.settimeout(TIMEOUT_S)
        try:
            sock.sendto(packet, (ip, 0))
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                data, (source, _) = sock.recvfrom(2048)
                icmp = data[(data[0] & 0x0F) * 4 :]  # after the IP header
                kind, _, _, got_ident, _ = struct.unpack("!BBHHH", icmp[:8])
                if kind == 0 and got_ident == ident:
                    return f"reply from {source}"
        except OSError as e:
            return _name(e)
    return "timeout"


def connect(ip: str, port: int) -> str:
    try:
        with socket.create_connection((ip, port), timeout=TIMEOUT_S) as sock:
            return "ok " + sock.makefile().readline().strip()
    except OSError as e:
        return _name(e)


def serve(ip: str, port: int, token: str) -> None:
    with socket.create_server((ip, port)) as server:
        print("listening", flush=True)
        while True:
            conn, _ = server.accept()
            with conn:
                conn.sendall(token.encode() + b"\n")


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _name(e: OSError) -> str:
    if isinstance(e, TimeoutError):
        return "timeout"
    return errno.errorcode.get(e.errno or 0, str(e))


def main(argv: list[str]) -> int:
    match argv:
        case ["ping", ip]:
            print(ping(ip))
        case ["connect", ip, port]:
            print(connect(ip, int(port)))
        case ["serve", ip, port, token]:
            serve(ip, int(port), token)
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
