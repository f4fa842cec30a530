"""scripts/timeline.py: a run's time per worker, group and module, and one run against another."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "timeline.py"


def phase(test: str, worker: str, start: float, stop: float, when: str = "call") -> dict[str, object]:
    return {"test": test, "when": when, "worker": worker, "start": start, "stop": stop}


def write(path: Path, phases: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in phases))
    return path


def timeline(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


BEFORE = [
    phase("tests/a.py::test_slow@srv", "gw0", 0, 40),
    phase("tests/a.py::test_quick@srv", "gw0", 40, 50),
    phase("tests/b.py::test_gone", "gw1", 0, 30),
    phase("tests/b.py::test_kept[x@y]", "gw1", 30, 45),  # an @ inside a parameter is not a group
]


def test_a_run_is_shown_per_worker_group_and_module(tmp_path: Path) -> None:
    done = timeline(write(tmp_path / "run.jsonl", BEFORE))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["gw0", "50", "0", "50"] and lines[2].split() == ["gw1", "45", "5", "45"]
    assert "first test to last: 50 s; all phases: 95 s of work" in done.stdout
    assert any(line.split() == ["srv", "50", "gw0"] for line in lines), done.stdout
    assert not any(line.startswith("y]") for line in lines), "a parameter's @ made a group"
    assert [line.split() for line in lines[-2:]] == [["tests/a.py", "50"], ["tests/b.py", "45"]]


def test_a_run_with_cpu_shows_each_modules_cpu_and_the_tests_that_cost_most(tmp_path: Path) -> None:
    phases = [
        {**phase("tests/a.py::test_slow@srv", "gw0", 0, 40), "cpu": 30.0},
        {**phase("tests/a.py::test_slow@srv", "gw0", 40, 41, when="teardown"), "cpu": 2.5},
        {**phase("tests/a.py::test_quick@srv", "gw0", 41, 50), "cpu": 1.0},
        {**phase("tests/b.py::test_busy", "gw1", 0, 20), "cpu": 35.0},
    ]
    done = timeline(write(tmp_path / "run.jsonl", phases))
    assert done.returncode == 0, done.stderr
    assert "CPU of the workers and what they started: 68 CPU-s" in done.stdout
    modules = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line.startswith("tests/")}
    assert modules["tests/a.py"] == ["50", "34"] and modules["tests/b.py"] == ["20", "35"]
    tests = done.stdout.split("test (most CPU)")[1].splitlines()[1:]
    assert [line.split() for line in tests] == [
        ["tests/b.py::test_busy", "35.0"],
        ["tests/a.py::test_slow", "32.5"],  # its phases summed, its group's suffix dropped
        ["tests/a.py::test_quick", "1.0"],
    ]


def test_one_run_against_another_shows_the_pace_the_changes_and_the_tests_only_one_has(tmp_path: Path) -> None:
    after = [
        phase("tests/a.py::test_slow@server", "gw0", 100, 120),  # its group renamed: still the same test
        phase("tests/a.py::test_slow@server", "gw0", 120, 124, when="teardown"),
        phase("tests/a.py::test_quick@server", "gw0", 124, 134),
        phase("tests/b.py::test_kept[x@y]", "gw1", 100, 118),
        phase("tests/c.py::test_new", "gw1", 118, 121),
    ]
    done = timeline(write(tmp_path / "after.jsonl", after), "--against", write(tmp_path / "before.jsonl", BEFORE))
    assert done.returncode == 0, done.stderr
    rows = {line[:22].strip(): line[22:].split() for line in done.stdout.splitlines()[1:4]}
    assert rows == {
        "first test to last s": ["50", "34", "-16"],
        "work s": ["95", "55", "-40"],
        "tests": ["4", "4", "+0"],
    }
    # the three tests both hold: 40 + 10 + 15 s before, 24 + 10 + 18 s after
    assert "pace: the 3 tests both runs hold took 52 s against 65 s (x0.80)" in done.stdout
    modules = [line.split() for line in done.stdout.split("module (largest changes)")[1].splitlines()[1:4]]
    assert modules == [
        ["tests/b.py", "45", "18", "-27"],
        ["tests/a.py", "50", "34", "-16"],
        ["tests/c.py", "0", "3", "+3"],
    ]
    assert "only before: 1 tests, 30 s\n    30.0  tests/b.py::test_gone" in done.stdout
    assert "only after: 1 tests, 3 s\n     3.0  tests/c.py::test_new" in done.stdout


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "No such file"),
        ("", "holds no test phase"),
        ('{"test": "t", "worker": "gw0", "start": 0, "stop": 1}\nnot json\n', "Expecting value"),
        ('{"test": "t", "worker": "gw0", "start": 0, "stop": 1}\n{"test": "t", "start": true, "stop": 1}\n', "line 2"),
        ('{"test": "t", "worker": "gw0", "start": 0, "stop": 1, "cpu": "lots"}\n', "line 1"),
    ],
    ids=["missing", "empty", "garbled", "not-a-phase", "cpu-not-a-number"],
)
def test_a_file_that_is_not_a_timeline_is_one_error_line(tmp_path: Path, content: str | None, why: str) -> None:
    bad = tmp_path / "bad.jsonl"
    if content is not None:
        bad.write_text(content)
    good = write(tmp_path / "good.jsonl", BEFORE)
    for args in ((bad,), (good, "--against", bad), (bad, "--against", good)):
        done = timeline(*args)
        assert done.returncode == 2, (args, done.stdout)
        assert done.stdout == "" and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert str(bad) in done.stderr and why in done.stderr, done.stderr
