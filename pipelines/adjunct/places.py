"""Where a host keeps the bases of a store, and the housekeeping of those folders: locks, pruning, cleaning.

``persistent`` bases live on the host's disk: ``PIPELINES_ADJUNCT_DIR`` if
set, else ``$PIPELINES_LOCAL_DIR/adjunct`` (``pipelines.storage.hostlocal``),
else the temporary directory's ``pipelines-adjunct-<uid>``. ``memory`` bases
prefer ``/dev/shm`` and fall back to the disk folder's ``memory`` sub-folder
(``pipelines.core.cachespace`` chooses per base). Readers look in every place,
so the processes of a host find a base wherever the first of them put it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from pipelines.adjunct.bases import BaseId
from pipelines.storage.home import Home
from pipelines.storage.hostlocal import LOCAL_DIR_ENV as HOST_DIR_ENV

LOCAL_DIR_ENV = "PIPELINES_ADJUNCT_DIR"
KEEP_BASES = 2
SHM = Path("/dev/shm")


def default_local_places(persistence: str) -> tuple[Path, ...]:
    """Where this host keeps bases of a store, in order of preference (the module's docstring)."""
    sub = "memory" if persistence == "memory" else "persistent"
    configured = os.environ.get(LOCAL_DIR_ENV)
    if configured:
        return (Path(configured) / sub,)
    host = os.environ.get(HOST_DIR_ENV)
    disk = Path(host) / "adjunct" if host else Path(tempfile.gettempdir()) / f"pipelines-adjunct-{os.getuid()}"
    if persistence == "memory" and SHM.is_dir() and os.access(SHM, os.W_OK):
        return (SHM / f"pipelines-adjunct-{os.getuid()}", disk / sub)
    return (disk / sub,)


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s file system (its nearest existing ancestor's);
    None when that folder is not writable."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return None
    stat = os.statvfs(existing)
    return stat.f_bavail * stat.f_frsize


def home_digest(home: Home) -> str:
    return hashlib.sha1(str(home.root).encode()).hexdigest()[:12]


def files(directories: Sequence[Path]) -> list[Path]:
    """The entries of every existing one of ``directories``."""
    return [p for d in directories if d.is_dir() for p in d.iterdir()]


@contextlib.contextmanager
def flock(directories: tuple[Path, ...], ident: BaseId) -> Iterator[None]:
    """Hold the host-wide lock of one (generation, class): one process builds, the others wait and map its file."""
    directory = directories[-1]  # the fallback: it still takes a lock file when the preferred place is full
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / f".lock-g{ident.generation}-c{ident.cls}"
    with open(lock, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def prune(directories: tuple[Path, ...], ident: BaseId) -> None:
    """Keep the newest ``KEEP_BASES`` files of one (generation, class, fraction), in all places together;
    mapped ones stay readable."""
    same = sorted(
        (i.seq, p)
        for p in files(directories)
        if (i := BaseId.parse(p.name)) is not None
        and (i.generation, i.cls, i.fraction) == (ident.generation, ident.cls, ident.fraction)
    )
    for _, path in same[:-KEEP_BASES]:
        with contextlib.suppress(OSError):
            path.unlink()


def remove_stale(directories: tuple[Path, ...], generation: int) -> None:
    """Remove other incarnations of the store and generations older than ``generation``, in every place."""
    for directory in directories:
        parent = directory.parent
        if parent.is_dir():
            for other in parent.iterdir():
                if other.is_dir() and other.name != directory.name:
                    shutil.rmtree(other, ignore_errors=True)
    for p in files(directories):
        ident = BaseId.parse(p.name)
        if ident is not None and ident.generation < generation:
            with contextlib.suppress(OSError):
                p.unlink()
