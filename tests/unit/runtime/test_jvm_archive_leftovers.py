"""An interrupted archive build leaves a half-written archive behind; the next build removes it, not a live one's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.runtime import jvm_archive


def test_only_archives_of_builds_that_are_gone_count_as_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spark-driver.jsa"
    monkeypatch.setattr(jvm_archive, "ARCHIVE", archive)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f".spark-driver.jsa.{int(gone.stdout)}"
    live = tmp_path / f".spark-driver.jsa.{os.getpid()}"
    odd = tmp_path / ".spark-driver.jsa.tmp"
    for path in (dead, live, odd, archive):
        path.write_bytes(b"x")
    assert sorted(jvm_archive._abandoned()) == sorted([dead, odd])
