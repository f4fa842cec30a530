"""What one host keeps for itself: caches and the bookkeeping of processes it started, never another host's need.

A local home keeps these in itself (``<home>/run``, as it always did). An
object-store home cannot hold a pid or a log file a process appends to, and no
other host may act on them anyway, so they live in a folder of this host:
``$PIPELINES_LOCAL_DIR``, else ``$XDG_STATE_HOME/pipelines``, else
``~/.local/state/pipelines``, one sub-folder per home. Losing it loses no
state: the control plane in the home holds everything that matters.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pipelines.storage.location import Location
from pipelines.storage.objects import ObjectStore

LOCAL_DIR_ENV = "PIPELINES_LOCAL_DIR"


def host_dir(root: Location, *parts: str) -> Path:
    """This host's folder for ``parts`` of the home at ``root`` (not created here: writers make it)."""
    if root.is_local:
        folder = root.local_path().joinpath(*parts)
    else:
        base = os.environ.get(LOCAL_DIR_ENV) or os.path.join(
            os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state"), "pipelines"
        )
        digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
        folder = Path(base, f"{root.bucket}-{digest}", *parts)
    return folder


@contextlib.contextmanager
def published(final: Path) -> Iterator[BinaryIO]:
    """Write ``final`` whole or not at all, and durably: a temporary file beside it, fsync, rename.

    A host's cache files are mapped by readers that never take a lock, so a file is never seen half-written, and
    it is never changed once published; the temporary file goes on any exception, an interrupt included.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".build-", suffix=final.suffix)
    try:
        with os.fdopen(fd, "wb") as raw:
            yield raw
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def pull(store: ObjectStore, remote: Location, local: Path, *, changed_only: bool = False) -> dict[str, str]:
    """Copy what the home holds under ``remote`` into ``local`` (a host's working copy); the digests of what was
    copied. ``changed_only``: skip files whose local copy has the remote's size and is not older than it."""
    digests = {}
    for entry in store.walk(remote):
        rel = entry.location.relative_to(remote)
        target = local / rel
        if changed_only and target.is_file():
            stat = target.stat()
            if stat.st_size == entry.size and entry.modified is not None and stat.st_mtime >= entry.modified:
                continue
        data = store.read(entry.location)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        digests[rel] = hashlib.sha256(data).hexdigest()
    return digests


def push(local: Path, store: ObjectStore, remote: Location, known: dict[str, str]) -> int:
    """Write back into the home the files of ``local`` that are new or changed since ``known``; how many."""
    written = 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        rel = path.relative_to(local).as_posix()
        data = path.read_bytes()
        if known.get(rel) != hashlib.sha256(data).hexdigest():
            store.write(remote / rel, data)
            written += 1
    return written
