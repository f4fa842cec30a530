"""Benchmark of keyed state: a stateful job's in-place switch against the same job without state, in one run.

Two jobs read one stream of keyed events: ``stateless`` (the demo's enrichment) and ``stateful`` (the example
fold, ``include/jobs/customer-totals.yaml``), both with the same simulated latency per record. The stateful job
first folds ``--keys`` distinct keys into its state (100,000 by default), then both take the same in-place
rescales (2 -> 4 -> 3 -> 2 ...) of a live driver while a producer appends events over all those keys. Figures:

* each switch's downtime (the drivers' own metric: old query stopped -> new query's first batch with data), the
  median of each job and the ratio stateful / stateless;
* what one virtual task reads of its state per batch (bytes fetched from the home: its cached fraction's tail,
  or a base built after a merge) against the state's whole size in the home;
* each batch's state commit against its sink commit;
* every switch's data-quality checks, the state check included, must pass.

    python -m benchmarks.bench_state [--keys 100000] [--rate 300] [--steps 3] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from pipelines.control import ControlPlane
from pipelines.jobs.config import JobConfig
from pipelines.operations import scaling
from pipelines.operations.jobs import create_job
from pipelines.quality.verify import verify_job
from pipelines.runtime import launcher
from pipelines.state.durable import StateTables
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from pipelines.usage import Parser

REPO = Path(__file__).resolve().parents[1]
FACTORS = [4, 3, 2, 4, 6, 2]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def setup(root: Path, keys: int, latency_ms: float) -> tuple[Home, dict[str, JobConfig]]:
    home = Home(root / "home")
    log_ = DeltaLog(home.streams)
    log_.create("events", 2)
    log(f"producing {keys:,} records, one per key ...")
    for start in range(0, keys, 20_000):
        log_.produce(
            "events",
            [
                (
                    f"key-{k}".encode(),
                    json.dumps({"key": f"key-{k}", "seq": 0, "amount": 1, "payload": "x" * 16}).encode(),
                    None,
                )
                for k in range(start, min(keys, start + 20_000))
            ],
        )
    configs = {}
    for name, path, sink in (
        ("stateless", "include/jobs/enrichment.yaml", "stateless_out"),
        ("stateful", "include/jobs/customer-totals.yaml", "stateful_out"),
    ):
        raw = JobConfig.load(REPO / path).to_dict()
        raw.update(
            name=name,
            elasticity_factor=2,
            process_options={"latency_ms": latency_ms},
            sink={"table": sink},
            dead_letter={"table": f"{sink}_dead"},
            batch={"max_records": 1000, "trigger_interval": "0.5 seconds"},
        )
        configs[name] = JobConfig.from_dict(raw)
        create_job(home, configs[name])
    return home, configs


class Events(threading.Thread):
    """``rate`` events a second over ``keys`` keys, each key's seq going on from the set-up's (which gave each
    key its seq 0); the per-key seqs live here, so a tick costs one append, whatever the number of keys."""

    def __init__(self, home: Home, rate: int, keys: int) -> None:
        super().__init__(name="bench-events", daemon=True)
        self.log, self.rate, self.keys = DeltaLog(home.streams), rate, keys
        self.next = [1] * keys
        self.halt = threading.Event()
        self.rng = random.Random(1)

    def run(self) -> None:
        tick = 0.25
        while not self.halt.is_set():
            started = time.monotonic()
            batch = []
            for _ in range(max(1, int(self.rate * tick))):
                k = self.rng.randrange(self.keys)
                seq, self.next[k] = self.next[k], self.next[k] + 1
                value = {"key": f"key-{k}", "seq": seq, "amount": self.rng.randrange(1, 1000), "payload": "x" * 16}
                batch.append((f"key-{k}".encode(), json.dumps(value, separators=(",", ":")).encode(), None))
            self.log.produce("events", batch)
            self.halt.wait(max(0.0, tick - (time.monotonic() - started)))


def wait_live(home: Home, job: str, version: int, timeout: float = 600.0) -> None:
    control = ControlPlane(home)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        beat = scaling.last_heartbeat(control, job)
        if beat and beat["live"] and beat["model_version"] == version:
            batch = control.checkpoints.latest_batch(job, version)
            if batch is not None and batch >= 1:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the driver of {job} did not run v{version} within {timeout:.0f}s")


def caught_up(home: Home, job: str, rate: int, timeout: float = 900.0) -> None:
    """Wait until the job's lag is small: the stateful job first folds every key in."""
    control = ControlPlane(home)
    end = time.monotonic() + timeout
    last = time.monotonic()
    while time.monotonic() < end:
        version = control.job_models.active_version(job) or 1
        frame = control.metrics.read(job, model_version=version, metrics=["lag_records"])
        if len(frame):
            newest = frame[frame["batch_id"] == frame["batch_id"].max()]
            lag = float(newest["value"].sum())
            if time.monotonic() - last > 10:
                log(f"  {job}: {lag:,.0f} records behind")
                last = time.monotonic()
            if lag < max(2_000, 3 * rate):  # a few batches' worth: caught up, in steady state
                return
        time.sleep(1.0)
    raise RuntimeError(f"{job} did not catch up within {timeout:.0f}s")


def switches(home: Home, job: str, factors: list[int]) -> list[float]:
    figures = []
    for factor in factors:
        result = scaling.run_all(home, scaling.ScalingRequest(job, factor, "bench"), say=lambda m: None)
        if result["status"] != "verified":
            raise RuntimeError(f"{job} -> factor {factor}: {result}")
        figures.append(float(result["downtime_s"]))
        log(f"  {job} -> factor {factor}: downtime {result['downtime_s']:.2f}s, dq {result['dq']}")
        wait_live(home, job, ControlPlane(home).job_models.active_version(job) or 0)
    return figures


def state_reads(home: Home) -> dict[str, float]:
    """Per task and batch: bytes of state read from the home, keys looked up; per batch: the commits."""
    control = ControlPlane(home)
    metrics = control.metrics.read(
        "stateful",
        metrics=["state.totals.bytes_from_home", "state.totals.keys_looked_up", "state_commit_s", "sink_commit_s"],
    )
    per_task = metrics[metrics["metric"] == "state.totals.bytes_from_home"]["value"]
    looked = metrics[metrics["metric"] == "state.totals.keys_looked_up"]["value"]
    state_commit = metrics[metrics["metric"] == "state_commit_s"]["value"]
    sink_commit = metrics[metrics["metric"] == "sink_commit_s"]["value"]
    return {
        "task_bytes_read_median": float(per_task.median()) if len(per_task) else 0.0,
        "task_bytes_read_p90": float(per_task.quantile(0.9)) if len(per_task) else 0.0,
        "task_keys_looked_up_median": float(looked.median()) if len(looked) else 0.0,
        "state_commit_s_median": float(state_commit.median()) if len(state_commit) else 0.0,
        "sink_commit_s_median": float(sink_commit.median()) if len(sink_commit) else 0.0,
    }


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys folded into the state first")
    parser.add_argument("--rate", type=int, default=300, help="records produced per second while switching")
    parser.add_argument("--latency-ms", type=float, default=0.5, help="simulated latency per record")
    parser.add_argument("--steps", type=int, default=3, help=f"rescales per job (at most {len(FACTORS)})")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    if not 1 <= args.steps <= len(FACTORS):
        parser.error(f"--steps must be 1 to {len(FACTORS)}")
    downtime: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-state-") as tmp:
        home, configs = setup(Path(tmp), args.keys, args.latency_ms)
        producer = Events(home, args.rate, args.keys)
        producer.start()
        try:
            for job in ("stateless", "stateful"):
                log(f"{job}: a live driver on {args.master}, catching up with {args.keys:,} records ...")
                launcher.run(home, job, available_now=False, master=args.master, detach=True)
                wait_live(home, job, 1)
                caught_up(home, job, args.rate)
                log(f"{job}: {args.steps} in-place rescales while {args.rate} records/s arrive")
                downtime[job] = switches(home, job, FACTORS[: args.steps])
                assert launcher.stop(home, job, timeout=180)
        finally:
            producer.halt.set()
            for job in configs:
                launcher.kill(home, job)
        verdicts = {job: verify_job(home, job, sequence="seq") for job in configs}
        for job, verdict in verdicts.items():
            log(f"  {job}, whole run: {verdict.summary().splitlines()[0]}")
            for state in verdict.states:
                log(f"    {state.summary().splitlines()[0]}")
        if not all(v.ok for v in verdicts.values()):
            return 1
        keys, size = StateTables(home, "stateful", configs["stateful"].state[0]).size()
        reads = state_reads(home)
    ratio = statistics.median(downtime["stateful"]) / statistics.median(downtime["stateless"])
    print(f"\n{'job':<10} {'switches':>8} {'median s':>9} {'worst s':>8}")
    for job, figures in downtime.items():
        print(f"{job:<10} {len(figures):>8} {statistics.median(figures):>9.2f} {max(figures):>8.2f}")
    print(f"\nstateful / stateless (median switch downtime): {ratio:.2f}x")
    share = reads["task_bytes_read_median"] / size if size else 0.0
    print(
        f"state in the home: {keys:,} rows, {size / 1e6:.1f} MB; one task reads {reads['task_bytes_read_median']:,.0f} "
        f"bytes of it per batch (median, {share:.4%}; p90 {reads['task_bytes_read_p90']:,.0f}), looking up "
        f"{reads['task_keys_looked_up_median']:,.0f} keys"
    )
    print(
        f"per batch: state commit {reads['state_commit_s_median'] * 1000:.0f} ms, sink commit "
        f"{reads['sink_commit_s_median'] * 1000:.0f} ms (medians)"
    )
    figures = {
        "state_keys": args.keys,
        "state_rows_in_home": keys,
        "state_bytes": size,
        "stateful_switch_downtime_s": round(statistics.median(downtime["stateful"]), 3),
        "stateless_switch_downtime_s": round(statistics.median(downtime["stateless"]), 3),
        "stateful_vs_stateless_downtime": round(ratio, 2),
        "task_state_bytes_read_per_batch": round(reads["task_bytes_read_median"]),
        "task_read_share_of_state": round(share, 6),
        "state_commit_s": round(reads["state_commit_s_median"], 4),
        "sink_commit_s": round(reads["sink_commit_s_median"], 4),
    }
    print(json.dumps({"bench": "state", "figures": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
