"""Where a host keeps its copy of an adjunct store: the first place with room for it, or one clear refusal.

An executor host serves a store from a local copy of one version of it (a
base, ``pipelines.adjunct.places``). A ``memory`` store prefers ``/dev/shm``
(RAM, shared by the host's processes), but a container gets 64 MiB of it by
default, against ~57 MB per million entries: filling it would fail halfway
through a write (``ENOSPC``) or leave nothing for the next version. So the copy
goes to the first place, in order of preference, whose free space holds it
plus a margin, and when no place does, the task is refused with one message
that names the store, what it needs and what each place has, instead of a
bare "No space left on device".

The margin covers what the free space figure does not: the file's footer and
what the host's other processes write meanwhile. The next version of the
store is placed anew when it is written, against what is free then (the
previous copy still counted), so a store outgrowing ``/dev/shm`` moves to the
disk version by version.

Pure: sizes in, a choice out (``tests/unit/core/test_cachespace.py``); the
engine measures the places and writes the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.errors import StoreError

MARGIN_MIN = 8 * 1024 * 1024
"""Bytes kept free beyond a copy, at the least."""
MARGIN_RATIO = 0.10
"""... or this share of the copy, when that is more."""


@dataclass(frozen=True)
class Place:
    """A folder a copy may go to, with the bytes free on its file system (None: unusable, e.g. not writable)."""

    path: str
    free: int | None


def margin(need: int) -> int:
    """The bytes a place must have free beyond a copy of ``need`` bytes."""
    return max(MARGIN_MIN, int(need * MARGIN_RATIO))


def fits(place: Place, need: int) -> bool:
    return place.free is not None and place.free >= need + margin(need)


def choose_place(store: str, need: int, places: Sequence[Place], version: int | None = None) -> Place:
    """The first of ``places`` (in order of preference) with room for a copy of ``need`` bytes.

    Raises ``StoreError`` naming the store, its size and every place with
    its free space when none has room.
    """
    if need < 0:
        raise ValueError(f"a copy cannot need {need} bytes")
    if not places:
        raise ValueError("no place to choose from")
    for place in places:
        if fits(place, need):
            return place
    where = "; ".join(
        f"{p.path} has {'no usable space (missing or not writable)' if p.free is None else human(p.free) + ' free'}"
        for p in places
    )
    at = "" if version is None else f" at version {version}"
    raise StoreError(
        f"adjunct store {store!r}{at} needs {human(need)} for its copy on this host, plus a margin of "
        f"{human(margin(need))}, and no place has room: {where}. Give the host more shared memory (docker "
        "--shm-size, compose shm_size) or local disk, or set PIPELINES_ADJUNCT_DIR to a folder with room"
    )


def human(n: int) -> str:
    """Bytes in the largest unit that keeps a number >= 1 (decimal, one decimal place): ``57.0 MB``."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")
