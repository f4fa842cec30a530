"""Where a host's copy of an adjunct store goes: the first place with room, or one message naming them all."""

from __future__ import annotations

import pytest

from pipelines.core.cachespace import MARGIN_MIN, MARGIN_RATIO, Place, choose_place, fits, human, margin
from pipelines.errors import PipelinesError, StoreError

MB = 1_000_000
SHM = "/dev/shm/pipelines-adjunct-0"
DISK = "/var/lib/pipelines/adjunct/memory"


def test_the_margin_is_a_floor_for_small_copies_and_a_share_of_large_ones() -> None:
    assert margin(0) == margin(1000) == MARGIN_MIN
    assert margin(1000 * MB) == int(1000 * MB * MARGIN_RATIO)


def test_a_copy_fits_with_its_margin_and_not_one_byte_less() -> None:
    need = 20 * MB
    assert fits(Place(SHM, need + margin(need)), need)
    assert not fits(Place(SHM, need + margin(need) - 1), need)
    assert not fits(Place(SHM, None), 0)


def test_shared_memory_is_preferred_while_it_has_room() -> None:
    places = [Place(SHM, 60 * MB), Place(DISK, 10_000 * MB)]
    assert choose_place("customers", 40 * MB, places).path == SHM


def test_a_container_default_shm_holds_a_million_entries_and_falls_back_to_disk_beyond() -> None:
    """64 MiB of /dev/shm (67.1 MB) against ~57 MB per million entries: one million fits with its margin,
    1.1 million (62.7 MB) does not, and neither does a million next to another store's 10 MB."""
    shm = 64 * 1024 * 1024
    assert choose_place("customers", 57 * MB, [Place(SHM, shm), Place(DISK, 10_000 * MB)]).path == SHM
    assert choose_place("customers", 62_700_000, [Place(SHM, shm), Place(DISK, 10_000 * MB)]).path == DISK
    assert choose_place("customers", 57 * MB, [Place(SHM, shm - 10 * MB), Place(DISK, 10_000 * MB)]).path == DISK


def test_an_unusable_place_is_passed_over() -> None:
    assert choose_place("customers", 1, [Place(SHM, None), Place(DISK, 100 * MB)]).path == DISK


def test_no_room_anywhere_is_one_error_naming_the_store_its_size_and_each_place() -> None:
    places = [Place(SHM, 30 * MB), Place(DISK, None)]
    with pytest.raises(StoreError) as caught:
        choose_place("customers", 57 * MB, places, version=12)
    message = str(caught.value)
    assert isinstance(caught.value, PipelinesError)
    for part in ("'customers'", "version 12", "57.0 MB", f"{SHM} has 30.0 MB free", f"{DISK} has no usable space"):
        assert part in message, message
    assert "PIPELINES_ADJUNCT_DIR" in message and "shm" in message


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        choose_place("customers", -1, [Place(SHM, MB)])
    with pytest.raises(ValueError):
        choose_place("customers", 1, [])


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (57 * MB, "57.0 MB"), (3 * 10**12, "3000.0 GB")]
)
def test_sizes_read_in_decimal_units(n: int, text: str) -> None:
    assert human(n) == text
