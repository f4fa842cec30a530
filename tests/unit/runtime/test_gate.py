"""The gate of a query started ahead of a switch: it holds, it lets go, it says why it gave up, it cleans up."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines.errors import StreamError
from pipelines.runtime.gate import Gate, remove_orphans, wait_open


def test_a_source_waits_until_the_driver_opens_its_gate(tmp_path: Path) -> None:
    gate = Gate("orders", 3, parent=str(tmp_path))
    timer = threading.Timer(0.2, gate.open)
    asked = time.monotonic()
    timer.start()
    wait_open(str(gate.path), "job orders v3", timeout_s=10)
    assert time.monotonic() - asked >= 0.15, "the source went through a closed gate"
    gate.remove()
    assert not gate.folder.exists()


def test_a_gate_never_opened_fails_the_query_saying_what_to_look_at(tmp_path: Path) -> None:
    gate = Gate("orders", 3, parent=str(tmp_path))
    with pytest.raises(StreamError) as raised:
        wait_open(str(gate.path), "job orders v3", timeout_s=0.05)
    message = str(raised.value)
    assert message.startswith("job orders v3: started ahead of an in-place switch")
    assert "hung or died" in message and "driver's log" in message


def test_the_next_gate_removes_the_folders_of_dead_drivers_only(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    orphan = tmp_path / f"pipelines-gate-orders-v2-pid{dead_pid}-abc"
    orphan.mkdir()
    (orphan / "open").touch()
    alive = tmp_path / f"pipelines-gate-orders-v2-pid{os.getpid()}-def"
    alive.mkdir()
    unrelated = tmp_path / "pipelines-gate-without-owner"
    unrelated.mkdir()
    gate = Gate("orders", 3, parent=str(tmp_path))
    assert not orphan.exists(), "a killed driver's gate folder stays behind"
    assert alive.exists() and unrelated.exists() and gate.folder.exists()
    assert f"-pid{os.getpid()}-" in gate.folder.name
    assert remove_orphans(str(tmp_path)) == []


def test_the_driver_sees_its_source_reach_the_gate_before_it_drains_the_old_query(tmp_path: Path) -> None:
    gate = Gate("orders", 3, parent=str(tmp_path))
    assert not gate.wait_ready(0.05, alive=lambda: True), "ready before its source reached the gate"
    source = threading.Thread(target=wait_open, args=(str(gate.path), "job orders v3", 10))
    source.start()
    assert gate.wait_ready(10, alive=lambda: True)
    assert source.is_alive(), "the source went on before the gate opened"
    gate.open()
    source.join(10)
    assert not source.is_alive()


def test_a_query_that_died_before_its_gate_is_not_waited_for(tmp_path: Path) -> None:
    gate = Gate("orders", 3, parent=str(tmp_path))
    asked = time.monotonic()
    assert not gate.wait_ready(30, alive=lambda: False)
    assert time.monotonic() - asked < 5
