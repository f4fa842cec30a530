"""The fault matrix, repeated: each point N times with random kill moments, then a table and one JSON line.

    python -m tests.faults.matrix --runs 10 [--points mid_batch,after_migrate] [--seed 7] [--jsonl FILE]
    python -m tests.faults.matrix --merge FILE [FILE ...]     # one table from runs split over processes

(``scripts/faults.sh`` runs it.) Each run is a home of its own: a crash at the
point (for a run, the N-th pass, N drawn at random; for an expansion, a
random step of the operation), the recovery a user would do, and the
verdict of ``scenarios.Scenario.outcome``. Exit 1 if any run lost,
duplicated or reordered a record or left the job half-scaled.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from pipelines.usage import Parser
from tests.faults.scenarios import SCENARIOS, Outcome


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per point (default 10)")
    parser.add_argument("--points", default=",".join(SCENARIOS), help=f"comma-separated, of {sorted(SCENARIOS)}")
    parser.add_argument("--seed", type=int, default=None, help="for the random kill moments (default: random)")
    parser.add_argument("--jsonl", type=Path, help="append each run's outcome to this file as it ends")
    parser.add_argument("--merge", type=Path, nargs="+", help="print the table of the outcomes in these files")
    args = parser.parse_args(argv)
    if args.merge:
        merged: dict[str, list[Outcome]] = defaultdict(list)
        for path in args.merge:
            for line in path.read_text().splitlines():
                outcome = Outcome(**json.loads(line))
                merged["during_expansion" if outcome.scenario == "expansion" else outcome.point].append(outcome)
        figures = _table({p: merged[p] for p in SCENARIOS if p in merged})
        print(json.dumps({"bench": "fault_matrix", "figures": {"files": [str(p) for p in args.merge], **figures}}))
        return 0 if all(o.ok for os_ in merged.values() for o in os_) else 1
    points = [p.strip() for p in args.points.split(",") if p.strip()]
    unknown = sorted(set(points) - set(SCENARIOS))
    if unknown or args.runs < 1:
        parser.error(f"unknown points {unknown}; points are {sorted(SCENARIOS)}" if unknown else "--runs must be >= 1")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"fault matrix: {len(points)} points x {args.runs} runs, seed {seed}", flush=True)
    outcomes: dict[str, list[Outcome]] = defaultdict(list)
    started = time.monotonic()
    total = len(points) * args.runs
    for i in range(args.runs):
        for point in points:
            done = sum(len(v) for v in outcomes.values())
            with tempfile.TemporaryDirectory(prefix=f"fault-{point}-") as tmp:
                t0 = time.monotonic()
                try:
                    outcome = SCENARIOS[point](Path(tmp) / "home", rng, lambda m: None)
                except AssertionError as e:  # the recovery itself failed: a finding, not a crash of the matrix
                    outcome = Outcome(point, "?", 0, False, -1, -1, -1, None, -1, False, -1, -1.0, [str(e)[:500]])
            outcomes[point].append(outcome)
            if args.jsonl:
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(asdict(outcome)) + "\n")
            elapsed = time.monotonic() - started
            print(
                f"[{done + 1}/{total}] {point} run {i + 1}: {'ok' if outcome.ok else 'FAILED'} "
                f"(killed at {outcome.point}@{outcome.nth}, recovery {outcome.recovery_s:.1f}s, "
                f"{time.monotonic() - t0:.0f}s; {elapsed / 60:.1f} min so far)"
                + ("".join(f"\n    {p}" for p in outcome.problems) if not outcome.ok else ""),
                flush=True,
            )
    figures = _table(outcomes)
    print(json.dumps({"bench": "fault_matrix", "figures": {"seed": seed, **figures}}))
    return 0 if all(o.ok for os_ in outcomes.values() for o in os_) else 1


def _table(outcomes: dict[str, list[Outcome]]) -> dict[str, object]:
    header = ("point", "runs", "killed", "lost", "duplicated", "order violations", "left half-scaled", "recovery s")
    rows = []
    figures: dict[str, object] = {}
    for point, runs in outcomes.items():
        recoveries = sorted(o.recovery_s for o in runs if o.recovery_s >= 0)
        half = sum(1 for o in runs if o.lock_left or o.unfinished_events or not o.model_in_force)
        median = statistics.median(recoveries) if recoveries else float("nan")
        worst = recoveries[-1] if recoveries else float("nan")
        row = {
            "runs": len(runs),
            "killed": sum(o.killed for o in runs),
            "lost": sum(max(o.lost, 0) for o in runs),
            "duplicated": sum(max(o.duplicated, 0) for o in runs),
            "order_violations": sum(max(o.order_violations, 0) for o in runs),
            "left_half_scaled": half,
            "failed": sum(not o.ok for o in runs),
            "recovery_median_s": round(median, 1),
            "recovery_worst_s": round(worst, 1),
        }
        figures[point] = row
        rows.append(
            (
                point,
                row["runs"],
                row["killed"],
                row["lost"],
                row["duplicated"],
                row["order_violations"],
                half,
                f"{median:.1f} (worst {worst:.1f})",
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for line in (header, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)))
    return figures


if __name__ == "__main__":
    sys.exit(main())
