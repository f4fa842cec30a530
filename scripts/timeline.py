"""Where a test run's wall time went, per worker: python scripts/timeline.py FILE [--top N] [--against BEFORE].

FILE is what ``PIPELINES_TEST_TIMELINE=FILE scripts/test.sh`` wrote (tests/conftest.py): one line per test phase,
with the CPU seconds the phase cost its worker and everything it started (Spark drivers, session JVM and its Python
workers included) where the run recorded it; then the modules' CPU and the tests that cost most CPU are shown too. On a
machine the suite keeps busy, CPU is what a change to a test saves: its wall time also moves with the other
worker's load.
The suite's wall time is its busiest worker's, so the table shows each worker's busy time, the time it stood
idle while the other worked (the tail a late group of shared-server tests leaves), each group of tests that share
a server (which must have run on one worker) and the modules that took most.

``--against BEFORE`` compares FILE with an earlier run's timeline instead: the totals, the modules whose time
changed most, and the tests only one run has. This machine's pace changes by 2x from day to day, so it also
gives the pace: how the time of the tests both runs hold changed, in total. A change to a few tests is read
against it (a module that took 10 % less while the pace was 0.9 did not get faster).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the table quietly, as a Unix tool's does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=15, help="how many modules to list")
    parser.add_argument("--against", type=Path, metavar="BEFORE", help="an earlier run's timeline to compare with")
    args = parser.parse_args(argv)
    try:
        phases = _load(args.file)
        before = _load(args.against) if args.against is not None else None
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if before is not None:
        _compare(before, phases, args.top)
    else:
        _summary(phases, args.top)
    return 0


def _load(path: Path) -> list[dict[str, Any]]:
    """The phases of a timeline file; ValueError naming the file and what is wrong with it."""
    try:
        phases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None
    if not phases:
        raise ValueError(f"{path} holds no test phase")
    wrong = next((i for i, p in enumerate(phases, 1) if not _phase(p)), None)
    if wrong is not None:
        raise ValueError(f"{path}: line {wrong} is not a test phase (test, worker, start, stop)")
    return phases


def _summary(phases: list[dict[str, Any]], top: int) -> None:
    first = min(p["start"] for p in phases)
    last = max(p["stop"] for p in phases)
    busy: dict[str, float] = defaultdict(float)
    ends: dict[str, float] = defaultdict(float)
    modules: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    groups: dict[str, float] = defaultdict(float)
    group_workers: dict[str, set[str]] = defaultdict(set)
    for p in phases:
        took = p["stop"] - p["start"]
        busy[p["worker"]] += took
        ends[p["worker"]] = max(ends[p["worker"]], p["stop"])
        modules[p["test"].split("::")[0]] += took
        cpu[p["test"].split("::")[0]] += p.get("cpu", 0.0)
        test, at, group = p["test"].rpartition("@")
        if at and "::" in test and "]" not in group:  # --dist loadgroup's suffix (a param may hold an @ too)
            groups[group] += took
            group_workers[group].add(p["worker"])
    wall = last - first
    print(f"{'worker':<8} {'busy s':>8} {'idle s':>8} {'done at s':>10}")
    for worker in sorted(busy):
        print(f"{worker:<8} {busy[worker]:>8.0f} {wall - busy[worker]:>8.0f} {ends[worker] - first:>10.0f}")
    print(f"\nfirst test to last: {wall:.0f} s; all phases: {sum(busy.values()):.0f} s of work")
    if groups:
        print(f"\n{'group (one worker each)':<40} {'s':>7}  workers")
        for group, took in sorted(groups.items(), key=lambda kv: -kv[1]):
            print(f"{group:<40} {took:>7.0f}  {','.join(sorted(group_workers[group]))}")
    if not any("cpu" in p for p in phases):
        print(f"\n{'module':<72} {'s':>7}")
        for module, took in sorted(modules.items(), key=lambda kv: -kv[1])[:top]:
            print(f"{module:<72} {took:>7.0f}")
        return
    print(f"\nCPU of the workers and what they started: {sum(cpu.values()):.0f} CPU-s")
    print(f"\n{'module':<64} {'s':>7} {'CPU s':>7}")
    for module, took in sorted(modules.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{module:<64} {took:>7.0f} {cpu[module]:>7.0f}")
    tests = _per_test(phases, "cpu")
    print(f"\n{'test (most CPU)':<100} {'CPU s':>7}")
    for test, used in sorted(tests.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{test[:100]:<100} {used:>7.1f}")


def _compare(before: list[dict[str, Any]], after: list[dict[str, Any]], top: int) -> None:
    old, new = _per_test(before), _per_test(after)
    print(f"{'':<22} {'before':>8} {'after':>8} {'change':>8}")
    for label, a, b in (
        ("first test to last s", _wall(before), _wall(after)),
        ("work s", sum(old.values()), sum(new.values())),
        ("tests", len(old), len(new)),
    ):
        print(f"{label:<22} {a:>8.0f} {b:>8.0f} {b - a:>+8.0f}")
    both = old.keys() & new.keys()
    then, now = sum(old[t] for t in both), sum(new[t] for t in both)
    if then > 0:
        print(f"\npace: the {len(both)} tests both runs hold took {now:.0f} s against {then:.0f} s (x{now / then:.2f})")
    modules_old, modules_new = _per_module(old), _per_module(new)
    changes = {m: modules_new.get(m, 0.0) - modules_old.get(m, 0.0) for m in modules_old.keys() | modules_new.keys()}
    print(f"\n{'module (largest changes)':<64} {'before':>7} {'after':>7} {'change':>7}")
    for module, change in sorted(changes.items(), key=lambda kv: (-abs(kv[1]), kv[0]))[:top]:
        print(f"{module:<64} {modules_old.get(module, 0):>7.0f} {modules_new.get(module, 0):>7.0f} {change:>+7.0f}")
    for label, only in (("only before", old.keys() - new.keys()), ("only after", new.keys() - old.keys())):
        if only:
            source = old if label == "only before" else new
            print(f"\n{label}: {len(only)} tests, {sum(source[t] for t in only):.0f} s")
            for test in sorted(only, key=lambda t: -source[t])[:top]:
                print(f"  {source[test]:>6.1f}  {test}")


def _per_test(phases: list[dict[str, Any]], measure: str = "s") -> dict[str, float]:
    """Each test's time (or ``cpu``) over its phases, by its id without --dist loadgroup's suffix (a group may be
    renamed)."""
    took: dict[str, float] = defaultdict(float)
    for p in phases:
        test, at, group = p["test"].rpartition("@")
        name = test if at and "::" in test and "]" not in group else p["test"]
        took[name] += p["stop"] - p["start"] if measure == "s" else p.get(measure, 0.0)
    return took


def _per_module(tests: dict[str, float]) -> dict[str, float]:
    took: dict[str, float] = defaultdict(float)
    for test, seconds in tests.items():
        took[test.split("::")[0]] += seconds
    return took


def _wall(phases: list[dict[str, Any]]) -> float:
    return max(p["stop"] for p in phases) - min(p["start"] for p in phases)


def _phase(line: object) -> bool:
    """A line as tests/conftest.py writes it (blank lines skipped before counting)."""
    return (
        isinstance(line, dict)
        and isinstance(line.get("test"), str)
        and isinstance(line.get("worker"), str)
        and all(isinstance(line.get(k), int | float) and not isinstance(line.get(k), bool) for k in ("start", "stop"))
        and (isinstance(line.get("cpu", 0.0), int | float) and not isinstance(line.get("cpu"), bool))
    )


if __name__ == "__main__":
    raise SystemExit(main())
