"""The soak: the demo's live job for a long while, rescaled every few minutes, with its memory watched.

    python -m pipelines.demo.soak --minutes 30 [--every 120] [--seed 7] [--input kinesis]   (scripts/soak.sh)

Continuous production at the demo's rate; every ``--every`` seconds a rescale
to a random factor up or down (1, 2, 4, 8: never the current one). On the
embedded log, one input expansion 2 -> 4 half way; on Kinesis (kinesis-mock on
loopback), a shard split a third of the way and a merge two thirds of the way.
Each step is verified over its scaling window, the whole run at the end (lost,
duplicated, order, routing), like the demo. A sampler records the resident
memory of this process and its children (the Spark JVM and its Python workers)
every 15 s. The number of Python workers follows the factor (and Spark keeps
idle ones), so growth is judged after the first step at the run's highest
factor: each half's median and the slope (``memory_trend``). Linux only (it
reads ``/proc``).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import threading
import time

from pipelines.demo.run import HEADERS, DemoPace, StepResult, run_demo
from pipelines.errors import PipelinesError
from pipelines.storage.home import resolve_home
from pipelines.texttable import table
from pipelines.usage import Parser

FACTORS = (1, 2, 4, 8)
SAMPLE_S = 15.0
CATCH_UP_S = 900.0  # a step after minutes at factor 1 inherits its backlog: its verification waits it out


INPUTS = ("deltalog", "kinesis")
CHANGES = {"expand": "expand input 2 -> 4", "split": "split a shard (3 shards)", "merge": "merge 2 shards (2 shards)"}


def plan_steps(
    minutes: float, every_s: float, rng: random.Random, input: str = "deltalog"
) -> list[tuple[str, int | None, str | None]]:
    """(step, factor, input change): start at 1, a random other factor every ``every_s`` seconds, and the input's
    repartitioning: one expansion half way (embedded log), or a split at a third and a merge at two thirds
    (Kinesis: the merge takes two of the three shards the split left)."""
    count = max(3, int(minutes * 60 // every_s))
    changes = {count // 2: "expand"} if input == "deltalog" else {count // 3: "split", 2 * count // 3: "merge"}
    steps: list[tuple[str, int | None, str | None]] = [("start at factor 1", 1, None)]
    current = 1
    for i in range(1, count):
        if i in changes:
            steps.append((CHANGES[changes[i]], None, changes[i]))
            continue
        factor = rng.choice([f for f in FACTORS if f != current])
        steps.append((f"{'up' if factor > current else 'down'} to {factor}", factor, None))
        current = factor
    return steps


def memory_trend(samples: list[tuple[float, float]], since: float) -> dict[str, float] | None:
    """Memory (time, MiB) samples from ``since`` on: each half's median and the least-squares slope per 10 min.

    ``since`` is the end of the first step at the run's highest factor: by
    then every Python worker the run will use has started, and Spark keeps
    idle workers after a scale-down, so memory before it grows with the
    factor, not with time. A leak shows as a slope and a higher second half.
    """
    after = [(t, mib) for t, mib in samples if t >= since]
    if len(after) < 4:
        return None
    half = len(after) // 2
    t0 = after[0][0]
    xs = [(t - t0) / 600 for t, _ in after]
    ys = [mib for _, mib in after]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
    return {
        "minutes": round((after[-1][0] - t0) / 60, 1),
        "first_half_median_mib": round(statistics.median(ys[:half]), 0),
        "second_half_median_mib": round(statistics.median(ys[half:]), 0),
        "slope_mib_per_10min": round(slope, 1),
    }


class MemorySampler(threading.Thread):
    """Resident memory (MiB) of this process and every descendant, every SAMPLE_S seconds."""

    def __init__(self) -> None:
        super().__init__(name="soak-memory", daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.time(), tree_rss_mib(os.getpid())))
            self.halt.wait(SAMPLE_S)

    def at(self, when: float) -> float | None:
        before = [rss for t, rss in self.samples if t <= when]
        return before[-1] if before else None


def tree_rss_mib(root: int) -> float:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total / (1 << 20)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=120.0, help="seconds between scaling steps")
    parser.add_argument(
        "--rate", type=int, default=600, help="records/s (default 600: factor 1 of the 2 ms/record job nearly keeps up)"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--input", choices=INPUTS, default="deltalog")
    parser.add_argument("--home", default=None, help="default: <PIPELINES_HOME>/soak (wiped first)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.every < 30:
        parser.error("--minutes must be > 0 and --every at least 30 s (a rescale itself takes a while)")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    steps = plan_steps(args.minutes, args.every, random.Random(seed), args.input)
    home = resolve_home(args.home)
    if not args.home:
        home = type(home)(home.root / "soak")
    print(
        f"soak on {args.input}: {args.minutes:g} min, a step every {args.every:g} s ({len(steps)} steps), "
        f"seed {seed}, {home.root}"
    )
    sampler = MemorySampler()
    sampler.start()
    memory: list[float | None] = []
    step_ends: list[float] = []
    started = time.monotonic()

    def on_step(result: StepResult) -> None:
        step_ends.append(time.time())
        memory.append(sampler.at(step_ends[-1]))
        print(
            f"[soak {(time.monotonic() - started) / 60:.1f} min] {result.step}: factor {result.factor}, "
            f"downtime {result.downtime_s}, verified {result.passed}, memory {memory[-1] or 0:.0f} MiB",
            flush=True,
        )

    # a rescale takes ~20 s itself
    pace = DemoPace(rate=args.rate, step_seconds=max(0.0, args.every - 20.0), catch_up_s=CATCH_UP_S)
    try:
        if args.input == "kinesis":
            from pipelines.demo.kinesis import run_kinesis_demo

            results, _final = run_kinesis_demo(home, pace, steps=steps, on_step=on_step)
        else:
            expansions = [(step, factor, 4 if change == "expand" else None) for step, factor, change in steps]
            results, _final = run_demo(home, pace, steps=expansions, on_step=on_step)
    except PipelinesError as e:
        minutes = (time.monotonic() - started) / 60
        print(f"\nsoak FAILED after {minutes:.1f} min, {len(memory)} steps done: {e}", file=sys.stderr)
        return 1
    sampler.halt.set()
    rows = [[*r.row(), f"{m:.0f}" if m is not None else "-"] for r, m in zip(results, [*memory, None], strict=True)]
    print("\n" + table([*HEADERS, "memory MiB"], rows))
    downtimes = [r.downtime_s for r in results if r.downtime_s is not None]
    samples = [rss for _, rss in sampler.samples]
    half = len(samples) // 2
    top = max(r.factor for r in results[:-1])
    warm = next(t for r, t in zip(results, step_ends, strict=False) if r.factor == top)
    trend = memory_trend(sampler.samples, warm)
    counts = results[-1].counts
    assert counts is not None  # the last result is the whole run's total, which always has its counts
    figures = {
        "minutes": round((time.monotonic() - started) / 60, 1),
        "steps": len(results) - 1,
        "lost": counts.get("lost"),
        "duplicated": counts.get("duplicates"),
        "order_violations": counts.get("out_of_order"),
        "worst_downtime_s": round(max(downtimes), 2) if downtimes else None,
        "memory_first_half_max_mib": round(max(samples[:half]), 0) if half else None,
        "memory_second_half_max_mib": round(max(samples[half:]), 0) if samples else None,
        **{f"memory_after_warmup_{k}": v for k, v in (trend or {}).items()},
        "all_verified": all(r.passed for r in results),
    }
    print(f"\nmemory of the driver (this process + Spark JVM + Python workers), MiB, every {SAMPLE_S:.0f} s:")
    print(" ".join(f"{rss:.0f}" for rss in samples))
    if trend:
        print(
            f"after the first step at factor {top} ({trend['minutes']} min of samples): median "
            f"{trend['first_half_median_mib']:.0f} MiB in the first half, {trend['second_half_median_mib']:.0f} MiB "
            f"in the second, slope {trend['slope_mib_per_10min']:+.0f} MiB per 10 min"
        )
    print(json.dumps({"bench": "soak", "figures": figures}))
    return 0 if figures["all_verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
