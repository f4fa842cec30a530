"""The home directory: the one folder that holds all of a deployment's state.

Layout (every part is created lazily by whoever writes it first)::

    <home>/streams/    embedded Delta-log input streams (``DeltaLog(home.streams)``)
    <home>/control/    control-plane Delta tables, one folder per table
    <home>/producers/  the CLI producer's per-stream sequence cache (a cache, never the truth)
    <home>/spark/      Spark checkpoint locations, one per job and model version
    <home>/sinks/      Delta sink tables of the jobs

One root keeps a laptop run, a test's ``tmp_path`` and a cluster deployment
(the root on shared or object storage) the same shape: a process needs only
``--home`` or ``PIPELINES_HOME`` to find everything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipelines.core.limits import not_utf8
from pipelines.errors import ConfigError, PipelinesError
from pipelines.storage import conditional
from pipelines.storage.location import Location, parse
from pipelines.storage.objects import ObjectStore, store_for

HOME_ENV = "PIPELINES_HOME"
DEFAULT_HOME = ".pipelines-home"


@dataclass(frozen=True, init=False)
class Home:
    """Where a deployment's state lives: a local directory or an ``s3://`` prefix; nothing is created here.

    Built from a ``Location`` or anything ``storage.location.parse`` takes (a
    path, ``s3://bucket/prefix``); every place below it is a ``Location``, read
    and written through ``store`` (docs/storage.md).
    """

    root: Location

    def __init__(self, root: Location | str | os.PathLike[str]) -> None:
        object.__setattr__(self, "root", parse(root))

    @property
    def store(self) -> ObjectStore:
        return store_for(self.root)

    @property
    def is_local(self) -> bool:
        return self.root.is_local

    @property
    def streams(self) -> Location:
        return self.root / "streams"

    @property
    def control(self) -> Location:
        return self.root / "control"

    @property
    def producers(self) -> Location:
        return self.root / "producers"

    @property
    def spark_checkpoints(self) -> Location:
        return self.root / "spark"

    @property
    def sinks(self) -> Location:
        return self.root / "sinks"

    def control_table(self, name: str) -> Location:
        return self.control / name

    def spark_checkpoint(self, job: str, version: int) -> Location:
        """Spark's own checkpoint of one model version's query (its offset and commit logs)."""
        return self.spark_checkpoints / job / f"v{version}"

    def spark_checkpoint_uri(self, job: str, version: int) -> str:
        """What Spark is given: a local path, or ``s3a://`` (hadoop-aws) under an object-store home.

        Under an S3 home Spark's checkpoint lives in the home like everything
        else, so a driver restarted on another host resumes the same query, and
        a replayed micro-batch keeps its id (the sink's exactly-once key).
        """
        place = self.spark_checkpoint(job, version)
        return place.path if place.is_local else place.hadoop_uri()


class HomeNotWritableError(PipelinesError):
    """A command that changes state was given a home (or a part of it) this process cannot write."""


WRITABLE_DEPTH = 3
"""``<home>/control/<table>/job=<job>``: deep enough for every folder a command adds files to."""


def check_writable(home: Home) -> None:
    """Refuse, before anything is written, a home this process cannot write to (read-only mount, permissions).

    Checked up front so a command never stops half way, e.g. with the lock
    taken but the new model not saved. ``os.access`` asks the kernel with this
    process's credentials, so it answers for root without the capability to
    override permissions, and for a read-only file system, as a write would.
    Folders deeper than ``WRITABLE_DEPTH`` (a table's data files) are not
    listed: a table's folders share one owner and mode in practice, and a write
    that still fails is reported as an I/O error naming its path.
    """
    if not home.is_local:
        conditional.verify(home.store, home.root)  # the store must let exactly one of two writers win
        return
    root = home.root.local_path()
    if not root.exists():
        parent = next((p for p in root.parents if p.exists()), None)
        if parent is not None and not os.access(parent, os.W_OK | os.X_OK):
            raise _not_writable(home, parent)
        return
    pending = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        if not os.access(folder, os.W_OK | os.X_OK):
            raise _not_writable(home, folder)
        if depth < WRITABLE_DEPTH:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                raise _not_writable(home, folder) from None
            pending.extend((Path(e.path), depth + 1) for e in entries if e.is_dir(follow_symlinks=False))


def _not_writable(home: Home, where: Path) -> HomeNotWritableError:
    place = "" if str(where) == str(home.root) else f" ({where} is not writable)"
    return HomeNotWritableError(
        f"the home {home.root} cannot be written by this process{place}; this command changes state there, and "
        "nothing was changed. Make the home writable for this user (or its file system read-write), or give "
        "another --home; commands that only read (job list, job show, lock show, stream describe) work as it is"
    )


def resolve_home(cli_value: str | None = None) -> Home:
    """``--home`` wins over ``PIPELINES_HOME``, which wins over ``./.pipelines-home``.

    A local path is made absolute at once: Airflow tasks, spark-submit and
    Spark's Python workers run with other working directories, and a relative
    home would silently point each of them at a different, empty state. A URI
    of a scheme that is not supported is refused before anything is written.
    """
    if cli_value is not None and not cli_value.strip():
        raise ConfigError("--home is empty; give a directory, or leave it out to use $PIPELINES_HOME or the default")
    value = cli_value or os.environ.get(HOME_ENV) or DEFAULT_HOME
    what = "--home" if cli_value else f"${HOME_ENV}" if os.environ.get(HOME_ENV) else "the home"
    if (escaped := not_utf8(value)) is not None:  # Delta's URIs are UTF-8
        raise ConfigError(f"{what} '{escaped}' is not UTF-8 text: a home's path must be")
    root = parse(value, what=what)
    if root.is_local:
        local = Path(root.path).resolve()
        _refuse_a_file(local, what, value)
        root = parse(local)
    return Home(root)


def _refuse_a_file(local: Path, what: str, value: str) -> None:
    """Refuse a home that is, or is below, something other than a directory: it can never be one.

    Read commands would answer "no jobs in <file>/control" with exit 0, and the first write (or the libraries'
    log file) failed with a bare "Not a directory (<home>/_pipelines/clock)" that names no home. The nearest
    existing folder on the way decides (``Path.exists`` is False below a file), before anything is read or made.
    """
    there = next((p for p in (local, *local.parents) if p.exists()), None)
    if there is None or there.is_dir():
        return
    if there == local:
        raise ConfigError(f"{what} {value!r} is a file, not a directory; give the home's directory")
    raise ConfigError(f"{what} {value!r} cannot be a directory: {there} is a file; give the home's directory")
