from __future__ import annotations

import gc

import pytest

from pipelines.core.bulk import collector_paused


def test_the_collector_is_off_inside_and_back_on_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_process_that_turned_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
