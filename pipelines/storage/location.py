"""Where a thing lives in the home: a local path or an ``s3://bucket/key``, as one value type.

The home is a URI (docs/storage.md): a local directory, the embedded default,
or a prefix in an S3 bucket shared by every host of a deployment. Code that
names a place in the home joins ``Location`` values with ``/`` as it would
``pathlib`` paths, and hands ``str(location)`` to delta-rs, which accepts both
forms. Pure: nothing here touches a file system or the network.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pipelines.errors import ConfigError

SCHEMES = ("file", "s3")
"""What a home can be. ``s3a`` and ``s3n`` are Hadoop's names for the same store: refused with a hint."""

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")


@dataclass(frozen=True, order=True)
class Location:
    """An absolute place: ``scheme`` ``file`` (``path`` absolute, POSIX) or ``s3`` (``bucket`` + ``path`` key)."""

    scheme: str
    bucket: str
    path: str

    def __truediv__(self, part: str | os.PathLike[str]) -> Location:
        text = os.fspath(part)
        segments = text.split("/")
        if not text or text.startswith("/") or "\\" in text or ".." in segments:
            raise ValueError(f"a part of a location is relative, non-empty and stays inside it, got {text!r}")
        joined = posixpath.normpath(posixpath.join(self.path, text)) if self.path else posixpath.normpath(text)
        return Location(self.scheme, self.bucket, joined)

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def parent(self) -> Location:
        parent = posixpath.dirname(self.path.rstrip("/"))
        if self.is_local:
            return Location(self.scheme, "", parent or "/")
        return Location(self.scheme, self.bucket, parent)

    @property
    def uri(self) -> str:
        """What delta-rs, pyarrow and Spark are given: the plain path for a local place, ``s3://b/k`` otherwise."""
        if self.is_local:
            return self.path
        return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"

    @property
    def key(self) -> str:
        """The object key (S3) or the absolute path (local): what the store's calls take."""
        return self.path

    def hadoop_uri(self) -> str:
        """The same place for Spark's Hadoop file systems: ``s3a://`` (hadoop-aws) or a ``file:`` URI."""
        if self.is_local:
            return Path(self.path).as_uri()
        return f"s3a://{self.bucket}/{self.path}"

    def local_path(self) -> Path:
        """The local path; only for a local place (callers that may meet S3 go through the store)."""
        if not self.is_local:
            raise ValueError(f"{self} is not on a local disk")
        return Path(self.path)

    def relative_to(self, other: Location) -> str:
        if (self.scheme, self.bucket) != (other.scheme, other.bucket):
            raise ValueError(f"{self} is not inside {other}")
        base = other.path.rstrip("/")
        if self.path == base:
            return ""
        if not self.path.startswith(base + "/") and base:
            raise ValueError(f"{self} is not inside {other}")
        return self.path[len(base) + 1 :] if base else self.path

    def __str__(self) -> str:
        return self.uri

    def __fspath__(self) -> str:
        """Only local places stand for a file-system path; an S3 place refuses, so no ``open()`` reaches one."""
        if not self.is_local:
            raise TypeError(f"{self} is on object storage, not a local path: go through pipelines.storage")
        return self.path


def local(path: str | os.PathLike[str]) -> Location:
    """A local place; relative paths are made absolute against the current directory."""
    return Location("file", "", os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(path)))))


def parse(value: str | os.PathLike[str] | Location, *, what: str = "the home") -> Location:
    """A location from what a user typed: a path, ``file://PATH`` or ``s3://BUCKET[/PREFIX]``.

    Any other scheme is refused with a ``ConfigError`` naming what is supported,
    before anything is written anywhere (a URI taken for a relative path would
    make a local folder named ``s3:`` and every host its own private "bucket").
    """
    if isinstance(value, Location):
        return value
    text = os.fspath(value).strip()
    if not text:
        raise ConfigError(f"{what} is empty; give a directory or an s3://bucket/prefix URI")
    if "://" not in text:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", text) and not re.match(r"^[A-Za-z]:[\\/]", text):
            scheme = text.split(":", 1)[0]
            raise _unsupported(what, text, scheme)
        return local(text)
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"{what} {text!r} names a host; a file: URI is local (file:///path)")
        return local(parsed.path)
    if scheme != "s3":
        raise _unsupported(what, text, scheme)
    bucket = parsed.netloc
    if not is_bucket_name(bucket):
        raise ConfigError(
            f"{what} {text!r}: {bucket!r} is not a valid S3 bucket name (3-63 lowercase letters, digits, dots, "
            "hyphens); give s3://BUCKET/PREFIX"
        )
    if parsed.query or parsed.fragment:
        raise ConfigError(f"{what} {text!r}: no query or fragment; give s3://BUCKET/PREFIX")
    prefix = posixpath.normpath(parsed.path.strip("/")) if parsed.path.strip("/") else ""
    if prefix.startswith("..") or "/../" in f"/{prefix}/":
        raise ConfigError(f"{what} {text!r}: the prefix may not contain '..'")
    return Location("s3", bucket, "" if prefix == "." else prefix)


def is_bucket_name(name: str) -> bool:
    """S3's rule for a bucket's name: 3-63 lowercase letters, digits, dots and hyphens, no '..'."""
    return bool(_BUCKET.fullmatch(name)) and ".." not in name


def _unsupported(what: str, text: str, scheme: str) -> ConfigError:
    hint = ""
    if scheme in ("s3a", "s3n"):
        hint = f" ({scheme}:// is Hadoop's name for S3: write s3://{text.split('://', 1)[-1]})"
    return ConfigError(
        f"{what} {text!r} uses the scheme {scheme!r}, which is not supported{hint}; a home is a local directory "
        "or s3://BUCKET/PREFIX (AWS S3 or an S3-compatible store that honours conditional writes)"
    )
