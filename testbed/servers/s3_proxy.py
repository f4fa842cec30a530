"""A forwarding proxy in front of an S3 endpoint: counts requests by kind, or plays a store without conditional writes.

Object stores bill requests, so the storage benchmark counts every request
of every client (boto3, pyarrow, delta-rs, hadoop-aws) by kind here, whatever
client sent it. With ``strip_conditions`` the proxy removes ``If-None-Match``
and ``If-Match`` from writes and signs them again with the store's identity:
to its clients it is then a store that ignores conditional writes, which the
platform must refuse (``storage.conditional``). ``POST /__proxy__/fail/503``
makes it a store's front end that answers every request with that server
error (an S3 error body, as a store that is overloaded or restarting sends),
``/fail/0`` forwards again. For tests and benchmarks only.

It runs in a process of its own (``proxied``): delta-rs holds the GIL while
it waits for the network, so a proxy thread in the caller's process would
never answer it. ``GET /__proxy__/counts`` (no bucket name has underscores)
answers the counts as JSON, ``POST /__proxy__/reset`` clears them.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

CONTROL = "/__proxy__"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
CONDITIONS = ("if-none-match", "if-match")
_S3_CODES = {500: "InternalError", 503: "ServiceUnavailable"}


def _place(path: str, depth: int = 4) -> str:
    """Where a request goes, coarsely: the first parts of its key (or its listing's prefix) below the bucket."""
    parts = urlsplit(path)
    _, _, key = parts.path.lstrip("/").partition("/")
    if not key:
        key = parse_qs(parts.query).get("prefix", [""])[0]
    return "/".join(p for p in key.split("/")[:depth] if p and not p.endswith(".parquet") and "=" not in p[:4])


def request_kind(method: str, path: str) -> str:
    """PUT, GET, LIST, HEAD, DELETE or POST: a GET of a bucket (``list-type``, or no key) is a LIST."""
    parts = urlsplit(path)
    key = parts.path.lstrip("/").partition("/")[2]
    query = parse_qs(parts.query, keep_blank_values=True)
    if method == "GET" and (not key or "list-type" in query or "delimiter" in query or "prefix" in query):
        return "LIST"
    return method


class S3Proxy:
    """``http://127.0.0.1:<port>`` forwarding to ``upstream``; ``counts()`` says how many requests of each kind."""

    def __init__(self, upstream: str, *, strip_conditions: bool = False, credentials: Any = None) -> None:
        parsed = urlsplit(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.strip_conditions = strip_conditions
        self.credentials = credentials  # (access key, secret key, region): to sign a stripped request again
        self._counts: Counter[str] = Counter()
        self._paths: Counter[str] = Counter()  # kind and the path's first parts below the bucket: where they go
        self._lock = threading.Lock()
        self.failing = 0  # a 5xx status every request is answered with, or 0: forward
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                """The request's payload, with HTTP's chunked transfer coding undone (pyarrow uploads that way)."""
                if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else b""
                parts: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()  # the CRLF after the chunk

            def _forward(self) -> None:
                body = self._body()
                if self.path.startswith(CONTROL):
                    if self.path == f"{CONTROL}/reset":
                        proxy.reset()
                    if self.path.startswith(f"{CONTROL}/fail/"):
                        proxy.failing = int(self.path.rpartition("/")[2])
                    if self.path == f"{CONTROL}/places":
                        with proxy._lock:
                            self._answer(json.dumps(dict(proxy._paths)).encode())
                        return
                    self._answer(json.dumps(proxy.counts()).encode())
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if proxy.strip_conditions and self.command in ("PUT", "POST"):
                    headers = proxy._resign(self.command, self.path, headers, body)
                kind = request_kind(self.command, self.path)
                with proxy._lock:
                    proxy._counts[kind] += 1
                    proxy._paths[f"{kind} {_place(self.path)}"] += 1
                if proxy.failing:
                    self._fail(proxy.failing)
                    return
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    self.send_response(response.status, response.reason)
                    for k, v in response.getheaders():
                        if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    # a HEAD's Content-Length is the object's size (its body is empty): pass it on as it is
                    upstream_length = response.getheader("Content-Length")
                    if self.command == "HEAD" and upstream_length is not None:
                        self.send_header("Content-Length", upstream_length)
                    else:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except OSError:
                    self.send_error(502, "upstream did not answer")
                finally:
                    upstream.close()

            def _fail(self, status: int) -> None:
                code = _S3_CODES.get(status, "InternalError")
                data = (
                    f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                    "<Message>the proxy plays a failing store</Message></Error>"
                )
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data.encode())

            def _answer(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> S3Proxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._paths.clear()

    def _resign(self, method: str, path: str, headers: dict[str, str], body: bytes) -> dict[str, str]:
        """The request without its conditions, signed again (the original signature covered them)."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        if self.credentials is None:
            raise ValueError("stripping conditions needs the store's credentials to sign again")
        access_key, secret_key, region = self.credentials
        kept = {
            k: v
            for k, v in headers.items()
            if k.lower() not in CONDITIONS and k.lower() not in ("authorization", "x-amz-date", "host")
        }
        url = f"http://{self.upstream_host}:{self.upstream_port}{path}"
        request = AWSRequest(method=method, url=url, data=body, headers=kept)
        S3SigV4Auth(Credentials(access_key, secret_key), "s3", region).add_auth(request)
        return dict(request.headers.items())


class ProxyProcess:
    """The proxy running in a child process: its endpoint, its counts, and its end."""

    def __init__(self, proc: subprocess.Popen[str] | None, endpoint: str) -> None:
        """``proc``: the proxy's process, or None for a proxy another process started (counts only)."""
        self.proc = proc
        self.endpoint = endpoint

    def _call(self, method: str, what: str) -> dict[str, int]:
        url = urlsplit(self.endpoint)
        connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=30)
        try:
            connection.request(method, f"{CONTROL}/{what}")
            return dict(json.loads(connection.getresponse().read()))
        finally:
            connection.close()

    def counts(self) -> dict[str, int]:
        return self._call("GET", "counts")

    def places(self) -> dict[str, int]:
        """Requests by kind and place (the first parts of their keys), for finding who makes them."""
        return self._call("GET", "places")

    def reset(self) -> None:
        self._call("POST", "reset")

    def fail(self, status: int) -> None:
        """Answer every request with ``status`` (a 5xx) from now on; 0 forwards again."""
        self._call("POST", f"fail/{status}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def proxied(upstream: str, *, strip_conditions: bool = False, credentials: Any = None) -> Iterator[ProxyProcess]:
    """A proxy to ``upstream`` in a child process on 127.0.0.1, killed on the way out."""
    argv = [sys.executable, "-m", "testbed.servers.s3_proxy", upstream]
    env = dict(os.environ)
    if strip_conditions:
        argv.append("--strip-conditions")
        env["S3_PROXY_CREDENTIALS"] = json.dumps(list(credentials))  # not on the command line
    root = Path(__file__).resolve().parents[2]  # where ``testbed`` is importable from, whatever the caller's folder
    proc = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"the S3 proxy did not start (exit {proc.poll()}): {line!r}")
        process = ProxyProcess(proc, line)
        yield process
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.servers.s3_proxy UPSTREAM [--strip-conditions]``: prints its endpoint, serves."""
    args = list(sys.argv[1:] if argv is None else argv)
    strip = "--strip-conditions" in args
    upstream = next(a for a in args if not a.startswith("--"))
    credentials = tuple(json.loads(os.environ["S3_PROXY_CREDENTIALS"])) if strip else None
    proxy = S3Proxy(upstream, strip_conditions=strip, credentials=credentials)
    print(proxy.endpoint, flush=True)
    proxy._server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
