"""The one door to the home's bytes: a local directory or an S3 bucket, behind the same few calls.

Every reader and writer of the home goes through a store (docs/storage.md):
delta-rs for table logs and commits (given ``delta_options()``), ``pyarrow.fs``
for data files (``filesystem()``), and the calls below for small records. The
call that coordinates is ``create``: a put that exactly one writer wins, an
exclusive link on a local disk and ``If-None-Match: *`` on S3. Nothing else
is needed to coordinate hosts, so no lock service and no shared file system.

Host-local caches (the adjunct engine's mapped copy, a staged range's local
mirror) are not the home and do not come through here.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import functools
import os
import shutil
import sys
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from pipelines.backoff import Backoff
from pipelines.storage.location import Location
from pipelines.storage.s3config import S3Settings


@dataclass(frozen=True)
class Entry:
    """One child of a listed place."""

    location: Location
    size: int
    is_dir: bool
    modified: float | None = None  # seconds since the epoch by the store's own clock (None for a folder)

    @property
    def name(self) -> str:
        return self.location.name


class ObjectStore(ABC):
    """Bytes at locations. Reads of a missing object raise ``FileNotFoundError`` on every store."""

    @abstractmethod
    def read(self, loc: Location) -> bytes: ...

    @abstractmethod
    def write(self, loc: Location, data: bytes) -> None:
        """Replace the object whole: a reader sees the old bytes or the new ones, never a part."""

    @abstractmethod
    def create(self, loc: Location, data: bytes) -> bool:
        """Write only if nothing is there: True for exactly one of any number of racing writers."""

    @abstractmethod
    def delete(self, loc: Location) -> None:
        """Remove the object; a missing one is no error."""

    @abstractmethod
    def exists(self, loc: Location) -> bool: ...

    @abstractmethod
    def modified(self, loc: Location) -> float:
        """When the store last wrote the object, in seconds since the epoch by the store's own clock.

        S3's ``Last-Modified``; a file's mtime on a local or network disk (set by the file server, not by the
        writing host, on NFS). ``FileNotFoundError`` when it is missing. ``storage.clock`` reads the store's
        time with it.
        """

    @abstractmethod
    def list(self, loc: Location) -> list[Entry]:
        """The children of a place (objects and "folders"); empty when there is nothing under it."""

    @abstractmethod
    def holds_any(self, loc: Location) -> bool:
        """Whether anything is under a place: one entry asked for, not a listing (a table's ``_delta_log`` holds a
        file per commit, and a check of it on every read listed thousands)."""

    @abstractmethod
    def delete_tree(self, loc: Location) -> None:
        """Remove everything under a place."""

    # ``builtins.list``: inside the class body, ``list`` names the method above, not the type.
    @abstractmethod
    def walk(self, loc: Location) -> builtins.list[Entry]:
        """Every object below a place, at any depth (no folders)."""

    @abstractmethod
    def filesystem(self) -> pafs.FileSystem:
        """The ``pyarrow.fs`` file system data files are read and written with (``arrow_path`` names them)."""

    @abstractmethod
    def delta_options(self) -> dict[str, str] | None:
        """``storage_options`` for delta-rs (None: its defaults)."""

    def arrow_path(self, loc: Location) -> str:
        return loc.path if loc.is_local else f"{loc.bucket}/{loc.path}"

    def makedirs(self, loc: Location) -> None:  # noqa: B027 - object stores have no folders to make
        """Make a folder where the store has folders (a local disk); nothing on object storage."""

    def read_text(self, loc: Location) -> str:
        return self.read(loc).decode("utf-8")

    def is_local(self) -> bool:
        return False


class LocalStore(ObjectStore):
    """A directory on this host's disk (the embedded default, and the test suites)."""

    def read(self, loc: Location) -> bytes:
        try:
            return Path(loc.path).read_bytes()
        except IsADirectoryError:
            raise FileNotFoundError(loc.path) from None

    def write(self, loc: Location, data: bytes) -> None:
        """Whole or not at all: written to a temporary file beside it, then renamed over it.

        The temporary file is removed on any exception, an interrupt included (Ctrl-C, or SIGTERM, which the CLI
        raises as ``Terminated``): nothing else ever removes it, and a produce stopped mid-write left one in the
        home for good. After the rename there is nothing left to remove.
        """
        path = Path(loc.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def create(self, loc: Location, data: bytes) -> bool:
        path = Path(loc.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:  # the temporary file goes whatever happens, an interrupt mid-write included (see ``write``)
            tmp.write_bytes(data)
            os.link(tmp, path)  # fails if it exists: whole content or nothing, and one winner
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def delete(self, loc: Location) -> None:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(loc.path)

    def exists(self, loc: Location) -> bool:
        return os.path.exists(loc.path)

    def modified(self, loc: Location) -> float:
        return os.stat(loc.path).st_mtime

    def list(self, loc: Location) -> list[Entry]:
        try:
            entries = list(os.scandir(loc.path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            if e.name.startswith(".") and e.name.endswith(".tmp"):
                continue  # a writer's temporary file: not an object yet
            try:
                is_dir = e.is_dir()
                stat = None if is_dir else e.stat()
            except FileNotFoundError:
                continue
            out.append(Entry(loc / e.name, stat.st_size if stat else 0, is_dir, stat.st_mtime if stat else None))
        return sorted(out, key=lambda x: x.location.path)

    def holds_any(self, loc: Location) -> bool:
        try:
            with os.scandir(loc.path) as entries:
                return any(not (e.name.startswith(".") and e.name.endswith(".tmp")) for e in entries)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def delete_tree(self, loc: Location) -> None:
        shutil.rmtree(loc.path, ignore_errors=True)

    def walk(self, loc: Location) -> builtins.list[Entry]:
        out = []
        for folder, _, files in os.walk(loc.path):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    continue
                path = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):
                    stat = os.stat(path)
                    out.append(Entry(loc / os.path.relpath(path, loc.path), stat.st_size, False, stat.st_mtime))
        return sorted(out, key=lambda x: x.location.path)

    def makedirs(self, loc: Location) -> None:
        os.makedirs(loc.path, exist_ok=True)

    def filesystem(self) -> pafs.FileSystem:
        return pafs.LocalFileSystem()

    def delta_options(self) -> dict[str, str] | None:
        return None

    def is_local(self) -> bool:
        return True


class S3Store(ObjectStore):
    """A bucket on AWS S3 or an S3-compatible store, configured by the standard ``AWS_*`` variables.

    Small records go through boto3 (its own retry settings: ``standard`` mode);
    data files through ``pyarrow.fs.S3FileSystem``; Delta commits through
    delta-rs, which writes each ``_delta_log`` commit with ``If-None-Match: *``.
    """

    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        self._local = threading.local()
        self._fs: pafs.FileSystem | None = None
        self._fs_lock = threading.Lock()

    @property
    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:  # boto3 clients are thread-safe, but their creation is not: one per thread
            client = self.settings.boto3_client()
            self._local.client = client
        return client

    def read(self, loc: Location) -> bytes:
        try:
            response = self._client.get_object(Bucket=loc.bucket, Key=loc.key)
        except self._client.exceptions.NoSuchKey:
            raise FileNotFoundError(str(loc)) from None
        body: bytes = response["Body"].read()
        return body

    def write(self, loc: Location, data: bytes) -> None:
        self._client.put_object(Bucket=loc.bucket, Key=loc.key, Body=data)

    def create(self, loc: Location, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        def in_flight(error: BaseException) -> bool:  # a racing conditional put S3 has not decided yet
            return isinstance(error, ClientError) and (
                _status(error) == 409 or error.response.get("Error", {}).get("Code") == "ConditionalRequestConflict"
            )

        try:
            _CONDITIONAL_RACE.retry(
                lambda: self._client.put_object(Bucket=loc.bucket, Key=loc.key, Body=data, IfNoneMatch="*"),
                attempts=10,
                retriable=in_flight,
            )
            return True
        except ClientError as error:
            if _status(error) == 412 or error.response.get("Error", {}).get("Code") == "PreconditionFailed":
                return False  # it exists: another writer created it
            if in_flight(error):
                return False  # still undecided after every try: the other writer's put is the one that lands
            raise

    def delete(self, loc: Location) -> None:
        self._client.delete_object(Bucket=loc.bucket, Key=loc.key)

    def exists(self, loc: Location) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.head_object(Bucket=loc.bucket, Key=loc.key)
            return True
        except ClientError as error:
            if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return False
            raise

    def modified(self, loc: Location) -> float:
        from botocore.exceptions import ClientError

        try:
            head = self._client.head_object(Bucket=loc.bucket, Key=loc.key)
        except ClientError as error:
            if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                raise FileNotFoundError(str(loc)) from None
            raise
        stamp: float = head["LastModified"].timestamp()
        return stamp

    def list(self, loc: Location) -> list[Entry]:
        prefix = loc.key.rstrip("/") + "/" if loc.key else ""
        out: dict[str, Entry] = {}
        for page in self._pages(Bucket=loc.bucket, Prefix=prefix, Delimiter="/"):
            for p in page.get("CommonPrefixes", []):
                name = p["Prefix"][len(prefix) :].rstrip("/")
                if name:
                    out[name] = Entry(loc / name, 0, True)
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix) :]
                if name and "/" not in name and name not in out:  # an emptied "folder" lists as a zero-byte key
                    out[name] = Entry(loc / name, int(obj["Size"]), False, obj["LastModified"].timestamp())
        return [out[k] for k in sorted(out)]

    def holds_any(self, loc: Location) -> bool:
        prefix = loc.key.rstrip("/") + "/" if loc.key else ""
        page = self._client.list_objects_v2(Bucket=loc.bucket, Prefix=prefix, MaxKeys=1)
        return bool(page.get("KeyCount") or page.get("Contents"))

    def delete_tree(self, loc: Location) -> None:
        prefix = loc.key.rstrip("/") + "/" if loc.key else ""
        pages = self._pages(Bucket=loc.bucket, Prefix=prefix)
        keys = [obj["Key"] for page in pages for obj in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            self._client.delete_objects(Bucket=loc.bucket, Delete={"Objects": chunk, "Quiet": True})

    def walk(self, loc: Location) -> builtins.list[Entry]:
        prefix = loc.key.rstrip("/") + "/" if loc.key else ""
        out = []
        for page in self._pages(Bucket=loc.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix) :]
                if name and not name.endswith("/"):
                    out.append(Entry(loc / name, int(obj["Size"]), False, obj["LastModified"].timestamp()))
        return out

    def _pages(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield from self._client.get_paginator("list_objects_v2").paginate(**kwargs)

    def filesystem(self) -> pafs.FileSystem:
        with self._fs_lock:
            if self._fs is None:
                self._fs = self.settings.arrow_filesystem()
                _finalize_s3_at_exit()
            return self._fs

    def delta_options(self) -> dict[str, str] | None:
        return self.settings.delta_options()


@functools.cache
def _finalize_s3_at_exit() -> None:
    """Shut pyarrow's S3 subsystem down before the interpreter does: its threads outliving it can abort (134)."""
    atexit.register(_finalize_s3)


def _finalize_s3() -> None:
    with contextlib.suppress(Exception):
        pafs.finalize_s3()


_STORES: dict[tuple[str, ...], ObjectStore] = {}
_CONDITIONAL_RACE = Backoff(base_s=0.02, cap_s=0.2)
"""Between tries of a conditional put that S3 answered 409: another conditional put of the key is in flight."""


def _status(error: Any) -> int | None:
    """The HTTP status of a botocore ``ClientError``."""
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


_STORES_LOCK = threading.Lock()


def store_for(loc: Location) -> ObjectStore:
    """The store holding ``loc``; one per process and configuration, so clients and connections are reused."""
    if loc.is_local:
        key: tuple[str, ...] = ("file",)
    else:
        settings = S3Settings.from_environment()
        key = ("s3", *settings.identity())
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = LocalStore() if loc.is_local else S3Store(S3Settings.from_environment())
            _STORES[key] = store
        return store


def refused(error: BaseException) -> str | None:
    """What boto3's ``error`` says, when it is the store refusing or not answering (the user's to fix), else None.

    Wrong keys, a missing bucket, no credentials at all or an endpoint nobody answers at reach the caller as
    botocore's own exception classes, not ``OSError``; the CLI names them in its one ``error:`` line instead of
    a traceback. Anything else (a bug, a store's internal error) stays what it is.
    """
    if "botocore" not in sys.modules:  # then no botocore error can be in flight
        return None
    from botocore import exceptions as boto

    if isinstance(error, boto.ClientError):
        detail = error.response.get("Error", {})
        code = str(detail.get("Code", ""))
        if code in _REFUSALS or error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (401, 403):
            return f"the store refused {error.operation_name}: {code}: {detail.get('Message') or error}"
        return None
    unanswered = (boto.ConnectionError, boto.HTTPClientError)  # refused, timed out, TLS, proxy, cut off
    no_keys = (boto.NoCredentialsError, boto.PartialCredentialsError, boto.CredentialRetrievalError)
    if isinstance(error, unanswered + no_keys + (boto.NoRegionError,)):
        return str(error)
    return None  # e.g. a ParamValidationError: our bug, which keeps its traceback


def unanswered(error: BaseException) -> bool:
    """Whether ``error`` is the store not answering, or answering with a server error: an outage, not a mistake.

    delta-rs's (``StoreUnavailableError``, from ``deltaio.readable``) and
    boto3's (no connection, a timeout after its retries, a 5xx or throttling).
    """
    from pipelines.errors import StoreUnavailableError

    if isinstance(error, StoreUnavailableError):
        return True
    if "botocore" not in sys.modules:
        return False
    from botocore import exceptions as boto

    if isinstance(error, boto.ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return int(status) >= 500 or error.response.get("Error", {}).get("Code") in ("SlowDown", "Throttling")
    return isinstance(error, (boto.ConnectionError, boto.HTTPClientError))


_REFUSALS = frozenset(
    {
        "AccessDenied",
        "AccountProblem",
        "AllAccessDisabled",
        "AuthorizationHeaderMalformed",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidBucketName",
        "InvalidToken",
        "NoSuchBucket",
        "PermanentRedirect",
        "SignatureDoesNotMatch",
    }
)
"""S3's error codes that mean the keys, the bucket or the endpoint are wrong, not the request."""
