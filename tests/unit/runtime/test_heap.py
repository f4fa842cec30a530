"""``heap.settle``: Spark's collection after every task skips what our tasks leave alive, and garbage still goes."""

from __future__ import annotations

import gc
import itertools
import sys
import types
import weakref
from collections.abc import Iterator

import pytest

from pipelines.runtime import heap

_names = (f"_test_heap_module_{n}" for n in itertools.count())
_imported: list[str] = []


def _import_something() -> None:
    """What a task that imports a module does to the process: new long-lived objects."""
    name = next(_names)
    sys.modules[name] = types.ModuleType(name)
    _imported.append(name)


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    heap._Settled.pid = heap._Settled.modules = heap._Settled.tasks = 0
    yield
    gc.unfreeze()  # the rest of the test session collects as usual
    while _imported:
        sys.modules.pop(_imported.pop(), None)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> Node:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a


def test_a_settled_heap_leaves_long_lived_objects_out_of_every_collection() -> None:
    survivors = [[i] for i in range(20_000)]  # long-lived containers, as a worker's modules and caches
    assert heap.settle()
    assert gc.get_freeze_count() >= len(survivors)
    walked = {id(o) for o in gc.get_objects()}  # what a full collection examines (the permanent generation is not)
    assert not any(id(s) in walked for s in survivors)
    assert id(survivors) not in walked


def test_a_second_task_does_not_freeze_again_until_something_new_is_imported() -> None:
    assert heap.settle()
    assert not heap.settle()
    _import_something()
    assert heap.settle()
    assert not heap.settle()


def test_cyclic_garbage_frozen_with_a_task_is_collected_within_refresh_tasks() -> None:
    assert heap.settle()
    garbage = _cycle()
    gone = weakref.ref(garbage)
    assert not heap.settle()  # nothing new imported: the cycle is collectable, not frozen
    del garbage
    gc.collect()
    assert gone() is None

    alive = _cycle()
    gone = weakref.ref(alive)
    heap._Settled.tasks = 0
    _import_something()
    assert heap.settle()  # frozen while still referenced (a task's objects at its end) ...
    del alive
    gc.collect()
    assert gone() is not None  # ... so collections skip it for now
    refreshes = [heap.settle() for _ in range(heap.REFRESH_TASKS)]
    assert refreshes.count(True) == 1 and refreshes[-1]
    gc.collect()
    assert gone() is None  # the refresh examined the frozen objects again


def test_a_forked_process_settles_its_own_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    assert heap.settle()
    assert not heap.settle()
    monkeypatch.setattr(heap.os, "getpid", lambda: -1)  # what a worker forked from a settled process sees
    assert heap.settle()
