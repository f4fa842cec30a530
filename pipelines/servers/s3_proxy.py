"""A forwarding proxy in front of an S3 endpoint: counts requests by kind, or plays a store without conditional writes.

Object stores bill requests, so the storage benchmark counts every request
of every client (boto3, pyarrow, delta-rs, hadoop-aws) by kind here, whatever
client sent it. With ``strip_conditions`` the proxy removes ``If-None-Match``
and ``If-Match`` from writes and signs them again with the store's identity:
to its clients it is then a store that ignores conditional writes, which the
platform must refuse (``storage.conditional``). For tests and benchmarks only.
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
CONDITIONS = ("if-none-match", "if-match")


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
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if proxy.strip_conditions and self.command in ("PUT", "POST"):
                    headers = proxy._resign(self.command, self.path, headers, body)
                with proxy._lock:
                    proxy._counts[request_kind(self.command, self.path)] += 1
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    self.send_response(response.status, response.reason)
                    for k, v in response.getheaders():
                        if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except OSError:
                    self.send_error(502, "upstream did not answer")
                finally:
                    upstream.close()

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


@contextmanager
def proxied(upstream: str, **kwargs: Any) -> Iterator[S3Proxy]:
    proxy = S3Proxy(upstream, **kwargs).start()
    try:
        yield proxy
    finally:
        proxy.stop()
