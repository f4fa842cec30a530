"""Where an executor host keeps a store's copy when ``/dev/shm`` is small: real tmpfs mounts of a few MiB.

A container's ``/dev/shm`` is 64 MiB by default; these tests shrink it to
1 MiB (a tmpfs mounted in a temporary folder, or over ``/dev/shm`` in a mount
namespace of a child process) so a small store stands for a large one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipelines.adjunct.config import parse_stores
from pipelines.adjunct.ingest import AdjunctStores
from pipelines.adjunct.local import LocalEngine
from pipelines.adjunct.views import BatchStores, view_at
from pipelines.errors import StoreError
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from pipelines.systems.registry import open_system

JOB = "enrich"
ENTRIES = 200


def _need_mounts(what: str, done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        pytest.fail(f"{what} failed (needs root or CAP_SYS_ADMIN to mount a tmpfs): {done.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """Mount tmpfs folders of a given size under ``tmp_path``; every one is unmounted afterwards, also on failure."""
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", f"test-{name}", str(path)], capture_output=True, text=True
        )
        _need_mounts(f"mount -t tmpfs -o size={size}", done)
        mounted.append(path)
        return path

    try:
        yield mount
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)


@pytest.fixture
def store(home: Home) -> Iterator[tuple[list, BatchStores]]:
    """A memory store of ``ENTRIES`` keys with 1 kB values, ingested: its configs and the batch's versions."""
    log: DeltaLog = open_system("deltalog", home)  # type: ignore[assignment]
    log.create("customers", 1)
    log.produce("customers", [(f"c{i}".encode(), f"{i:04d}".encode() * 250, None) for i in range(ENTRIES)])
    configs = list(parse_stores({"customers": {"input": "customers", "persistence": "memory", "bootstrap": True}}))
    stores = AdjunctStores.open(home, JOB, configs, {"deltalog": log})  # type: ignore[dict-item]
    batch = stores.ingest()
    yield configs, batch
    stores.close()
    log.close()


def _arrows(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*.arrow"))


def _serve(engine: LocalEngine, home: Home, configs: list, batch: BatchStores) -> list[bytes | None]:
    view = view_at(engine, home, JOB, configs[0], batch["customers"])
    return view.get_many([b"c0", b"c199", b"nope"]).to_pylist()


EXPECTED = [b"0000" * 250, b"0199" * 250, None]


def test_a_store_goes_to_shared_memory_while_it_has_room(
    home: Home, store: tuple[list, BatchStores], tmpfs: Callable[[str, str], Path], tmp_path: Path
) -> None:
    configs, batch = store
    shm, disk = tmpfs("shm", "16m"), tmp_path / "disk"
    engine = LocalEngine(shm / "adjunct", [disk])
    assert _serve(engine, home, configs, batch) == EXPECTED
    assert len(_arrows(shm)) == 1 and _arrows(disk) == []


def test_a_small_shm_falls_back_to_disk_and_the_hosts_other_processes_map_that_copy(
    home: Home, store: tuple[list, BatchStores], tmpfs: Callable[[str, str], Path], tmp_path: Path
) -> None:
    configs, batch = store
    shm, disk = tmpfs("shm", "1m"), tmp_path / "disk"
    first = LocalEngine(shm / "adjunct", [disk])
    assert _serve(first, home, configs, batch) == EXPECTED
    assert _arrows(shm) == [] and len(_arrows(disk)) == 1, "the copy is on disk, nothing half-written in shm"
    assert first.builds == 1
    second = LocalEngine(shm / "adjunct", [disk])  # another Python worker of the host
    assert _serve(second, home, configs, batch) == EXPECTED
    assert second.builds == 0, "the host's other process maps the copy the first one put on disk"


def test_no_room_anywhere_is_one_clear_error_and_nothing_written(
    home: Home, store: tuple[list, BatchStores], tmpfs: Callable[[str, str], Path]
) -> None:
    configs, batch = store
    shm, disk = tmpfs("shm", "1m"), tmpfs("disk", "2m")
    engine = LocalEngine(shm / "adjunct", [disk / "adjunct"])
    with pytest.raises(StoreError) as caught:
        _serve(engine, home, configs, batch)
    message = str(caught.value)
    assert "adjunct store 'customers' at version" in message and " kB for its copy" in message, message
    assert f"{shm / 'adjunct'} has 1.0 MB free" in message and f"{disk / 'adjunct'} has 2.1 MB free" in message
    assert _arrows(shm) == _arrows(disk) == [] and not list(shm.rglob(".build-*")), "nothing half-written"


CHILD = """
import json, sys
from pipelines.adjunct.config import parse_stores
from pipelines.adjunct.views import BatchStores, task_stores
from pipelines.storage.home import Home
configs = list(parse_stores({"customers": {"input": "customers", "persistence": "memory"}}))
view = task_stores(Home(sys.argv[1]), "enrich", configs, BatchStores.from_json(sys.argv[2]))["customers"]
print(json.dumps([v[:4].decode() if v else None for v in view.get_many([b"c7", b"nope"]).to_pylist()]))
"""


def test_a_task_on_a_host_with_a_tiny_dev_shm_serves_from_its_local_dir(
    home: Home, store: tuple[list, BatchStores], tmp_path: Path
) -> None:
    """The default places, end to end: a child process whose ``/dev/shm`` is a 1 MiB tmpfs (its own mount
    namespace) serves the store from ``$PIPELINES_LOCAL_DIR/adjunct/memory``."""
    _, batch = store
    local = tmp_path / "host"
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_ADJUNCT_DIR"} | {"PIPELINES_LOCAL_DIR": str(local)}
    script = 'mount -t tmpfs -o size=1m test-shm /dev/shm && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    done = subprocess.run(
        [*argv, sys.executable, "-c", CHILD, str(home.root), batch.to_json()],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    _need_mounts("unshare --mount with a tmpfs over /dev/shm", done)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["0007", None]
    copies = _arrows(local / "adjunct" / "memory")
    assert len(copies) == 1, f"the copy went to the host's local dir: {copies}\n{done.stderr[-2000:]}"
    assert "lacks room" in done.stderr, done.stderr[-2000:]
