"""``--dist loadgroup`` keeps each group of tests on one worker, as ``scripts/test.sh`` relies on.

The suite's groups are what let one Airflow, one broker and one set of test hosts serve every test that needs
them; when pytest-xdist's grouping silently stopped working (pytest 9.2 moved a node's id), each worker started
its own. This runs a small session the way ``scripts/test.sh`` does, with the suite's own conftest as a plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TESTS = """
import json, os
import pytest

def _record(request, out):
    line = {"node": request.node.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER")}
    with open(out, "a") as f:
        f.write(json.dumps(line) + "\\n")

@pytest.mark.parametrize("n", range(6))
@pytest.mark.xdist_group("shared")
def test_grouped(n, request):
    _record(request, os.environ["GROUPS_OUT"])

@pytest.mark.parametrize("n", ["a@b", "c"])
@pytest.mark.xdist_group("other")
def test_grouped_with_at_in_its_id(n, request):
    _record(request, os.environ["GROUPS_OUT"])

@pytest.mark.parametrize("n", range(6))
def test_free(n, request):
    _record(request, os.environ["GROUPS_OUT"])
"""


def test_every_test_of_a_group_runs_on_one_worker_and_carries_the_groups_suffix(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n', encoding="utf-8")
    (tmp_path / "test_grouped.py").write_text(TESTS, encoding="utf-8")
    out = tmp_path / "ran.jsonl"
    env = {**os.environ, "GROUPS_OUT": str(out), "PYTHONPATH": str(REPO)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run on a worker: the inner session is its own
    env.pop("PIPELINES_TEST_TIMELINE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(ran) == 14, ran
    for group in ("shared", "other"):
        mine = [r for r in ran if r["node"].endswith(f"@{group}")]
        assert len(mine) == (6 if group == "shared" else 2), f"tests of {group!r} without its suffix: {ran}"
        assert len({r["worker"] for r in mine}) == 1, f"the group {group!r} ran on several workers: {mine}"
    assert not [r for r in ran if "test_free" in r["node"] and r["node"].endswith(("@shared", "@other"))]
