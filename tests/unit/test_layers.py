"""The layers and no-cycles contracts of ``pyproject.toml`` (``lint-imports``, run by ``scripts/test.sh``): kept by the
code as it is, broken by an import planted against them in a copy of it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root`` (the copy's, not the installed ones)."""
    env = {"PYTHONPATH": f"{root}:{root / 'plugins'}", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "pipelines", root / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        REPO / "plugins" / "pipelines_airflow",
        root / "plugins" / "pipelines_airflow",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_code_keeps_both_contracts(copy: Path) -> None:
    done = _lint(copy)
    assert done.returncode == 0 and "2 kept, 0 broken" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_an_upward_import_breaks_the_layers(copy: Path) -> None:
    with (copy / "pipelines" / "core" / "bulk.py").open("a") as f:
        f.write("\nfrom pipelines.runtime import session  # planted: the pure core reaching up to Spark\n")
    done = _lint(copy)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "layers: each imports only from those below it BROKEN" in done.stdout
    assert "pipelines.core.bulk -> pipelines.runtime.session" in done.stdout, done.stdout[-3000:]


def test_two_modules_importing_each_other_break_the_no_cycles_contract(copy: Path) -> None:
    with (copy / "pipelines" / "state" / "layout.py").open("a") as f:
        f.write("\nfrom pipelines.state import task  # planted: layout <-> task\n")
    done = _lint(copy)
    assert done.returncode != 0 and "No cycles are allowed in pipelines.state" in done.stdout, done.stdout[-3000:]
