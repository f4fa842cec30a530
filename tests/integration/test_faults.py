"""Fault injection's own contract: a typo cannot pass silently, raise vs kill, the N-th pass across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.faults import FAULT_DIR_ENV, FAULT_ENV, InjectedFault, crash_point, parse


def test_specs_parse_and_a_typo_is_refused() -> None:
    assert parse("after_migrate") == (False, "after_migrate", 1)
    assert parse("kill:mid_batch@3") == (True, "mid_batch", 3)
    with pytest.raises(ValueError, match="unknown point 'after_migrat'"):
        parse("after_migrat")
    with pytest.raises(ValueError, match="only for kill:POINT@N"):
        parse("after_migrate@2")
    with pytest.raises(ValueError, match="whole number"):
        parse("kill:mid_batch@x")


def test_a_point_raises_only_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULT_ENV, raising=False)
    crash_point("after_migrate")  # production: nothing
    monkeypatch.setenv(FAULT_ENV, "during_switch")
    crash_point("after_migrate")  # another point: nothing
    with pytest.raises(InjectedFault, match="during_switch"):
        crash_point("during_switch")


def test_kill_at_the_nth_pass_counted_across_the_processes_of_a_session(tmp_path: Path) -> None:
    """Two processes of one session pass the point; the 3rd pass overall kills the whole session.

    The passes are counted in the directory the caller named, so crashes run side by side count apart.
    """
    script = (
        "import subprocess, sys\n"
        "from pipelines.faults import crash_point\n"
        "crash_point('mid_batch'); print('pass', flush=True)\n"
        "subprocess.run([sys.executable, '-c', \"from pipelines.faults import crash_point; crash_point('mid_batch'); "
        "print('child pass', flush=True)\"])\n"
        "crash_point('mid_batch'); print('not reached', flush=True)\n"
    )
    env = {**os.environ, FAULT_ENV: "kill:mid_batch@3", FAULT_DIR_ENV: str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    out, _ = proc.communicate(timeout=60)
    assert out.split("\n")[:2] == ["pass", "child pass"]
    assert "not reached" not in out
    assert proc.returncode == -9
    assert [(p.name, p.stat().st_size) for p in tmp_path.iterdir()] == [(f"pipelines-fault-{proc.pid}-mid_batch", 3)]
