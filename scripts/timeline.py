"""Where a test run's wall time went, per worker: python scripts/timeline.py FILE [--top N].

FILE is what ``PIPELINES_TEST_TIMELINE=FILE scripts/test.sh`` wrote (tests/conftest.py): one line per test phase.
The suite's wall time is its busiest worker's, so the table shows each worker's busy time, the time it stood
idle while the other worked (the tail a late group of shared-server tests leaves), each group of tests that share
a server (which must have run on one worker) and the modules that took most.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the table quietly, as a Unix tool's does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=15, help="how many modules to list")
    args = parser.parse_args(argv)
    try:
        phases = [json.loads(line) for line in args.file.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        print(f"error: {args.file}: {error}", file=sys.stderr)
        return 2
    if not phases:
        print(f"error: {args.file} holds no test phase", file=sys.stderr)
        return 2
    wrong = next((i for i, p in enumerate(phases, 1) if not _phase(p)), None)
    if wrong is not None:
        print(f"error: {args.file}: line {wrong} is not a test phase (test, worker, start, stop)", file=sys.stderr)
        return 2
    first = min(p["start"] for p in phases)
    last = max(p["stop"] for p in phases)
    busy: dict[str, float] = defaultdict(float)
    ends: dict[str, float] = defaultdict(float)
    modules: dict[str, float] = defaultdict(float)
    groups: dict[str, float] = defaultdict(float)
    group_workers: dict[str, set[str]] = defaultdict(set)
    for p in phases:
        took = p["stop"] - p["start"]
        busy[p["worker"]] += took
        ends[p["worker"]] = max(ends[p["worker"]], p["stop"])
        modules[p["test"].split("::")[0]] += took
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
    print(f"\n{'module':<72} {'s':>7}")
    for module, took in sorted(modules.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{module:<72} {took:>7.0f}")
    return 0


def _phase(line: object) -> bool:
    """A line as tests/conftest.py writes it (blank lines skipped before counting)."""
    return (
        isinstance(line, dict)
        and isinstance(line.get("test"), str)
        and isinstance(line.get("worker"), str)
        and all(isinstance(line.get(k), int | float) and not isinstance(line.get(k), bool) for k in ("start", "stop"))
    )


if __name__ == "__main__":
    raise SystemExit(main())
