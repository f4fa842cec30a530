"""A home on a store that does not honour conditional writes is refused, once, at its first use.

Delta commits, fetch pins, claims and every other coordination record of the
platform rely on one thing: of two puts of one key with ``If-None-Match: *``,
exactly one succeeds. A store that ignores the header lets both succeed and
no one notices: measured here, 11 of 24 concurrent Delta appends survived and
every racer of one app transaction "won", with no error anywhere. So before a
command first writes to an object-store home, two conditional puts of one new
key must give one success and one refusal; the verdict is then kept in the
home (``_pipelines/conditional-writes.json``) so later calls pay one GET.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

from pipelines.errors import PipelinesError
from pipelines.storage.location import Location
from pipelines.storage.objects import ObjectStore

MARKER = "_pipelines/conditional-writes.json"

_VERIFIED: set[str] = set()
_LOCK = threading.Lock()


class UnsafeStoreError(PipelinesError):
    """The home's object store does not refuse a second conditional put of one key."""


def verify(store: ObjectStore, root: Location, *, endpoint: str | None = None) -> None:
    """Refuse (``UnsafeStoreError``) a store where two ``create`` calls of one new key both succeed."""
    if store.is_local():
        return
    key = str(root)
    with _LOCK:
        if key in _VERIFIED:
            return
    marker = root / MARKER
    try:
        recorded = json.loads(store.read(marker))
    except FileNotFoundError:
        recorded = None
    except ValueError:
        recorded = None  # a damaged marker: check again and write it anew
    if not (isinstance(recorded, dict) and recorded.get("conditional_put") is True):
        probe = root / "_pipelines" / "probes" / uuid.uuid4().hex
        first = store.create(probe, b"first")
        second = store.create(probe, b"second")
        kept = store.read(probe) if first else b""
        store.delete(probe)
        where = endpoint or getattr(getattr(store, "settings", None), "endpoint_url", None) or "AWS S3"
        if not first or second or kept != b"first":
            raise UnsafeStoreError(
                f"the object store at {where} holding {root} does not honour conditional writes (a second "
                "PUT with If-None-Match: * of one key was accepted); Delta commits and the platform's locks, pins "
                "and claims would silently overwrite each other there, so this home is refused and nothing was "
                "written. Use AWS S3 or an S3-compatible store that supports conditional writes "
                "(If-None-Match on PutObject)"
            )
        note = {"conditional_put": True, "checked_by": socket.gethostname(), "checked_at_unix": int(time.time())}
        store.write(marker, json.dumps(note).encode())
    with _LOCK:
        _VERIFIED.add(key)
