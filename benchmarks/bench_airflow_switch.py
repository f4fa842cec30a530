"""Benchmark of a rescale's downtime through Airflow against the CLI's, on the same live job, in one run.

The README's Airflow (``scripts/airflow.sh``: api-server, scheduler, dag-processor, triggerer, its scheduled DAGs
unpaused) runs beside a continuous driver under a steady producer. The same moves alternate between the two
paths: ``pipelines rescale`` (every step in one process) and an ``elastic_rescale`` run triggered through the
REST API (one task per step, the waits deferred). Downtime is what the driver records, for both: from the old
query's stop to the new query's first batch with data (``scaling.measure``).

Where an Airflow switch's extra time goes is printed beside it: the machine's busy CPU seconds inside the switch
window (two cores: a task process starting imports Airflow and this package, and takes them from the driver) and
the task instances of any DAG that ran in that window.

    python -m benchmarks.bench_airflow_switch [--pairs 2] [--rate 300] [--master local[2]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from pipelines.control import ControlPlane
from pipelines.demo.producer import produce, produce_at_rate
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.operations.scaling.readings import metric_times
from pipelines.quality.verify import verify_job
from pipelines.runtime import launcher
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from pipelines.usage import Parser
from testbed.ports import free_port

REPO = Path(__file__).resolve().parents[1]
JOB = "enrichment"
MOVES = ((1, 2), (2, 1))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Airflow:
    """``scripts/airflow.sh`` on a home of its own, and a REST client logged in as its admin."""

    def __init__(self, root: Path, home: Home) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.root = root
        env = {
            **os.environ,
            "SKIP_SETUP": "1",
            "AIRFLOW_HOME": str(root / "airflow"),
            "PIPELINES_HOME": str(home.root),
            "AIRFLOW_PORT": str(self.port),
        }
        self.log_file = (root / "airflow.log").open("w")
        self.process = subprocess.Popen(
            ["scripts/airflow.sh"],
            cwd=REPO,
            env=env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.client: httpx.Client | None = None

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"scripts/airflow.sh ended ({self.process.returncode}); see {self.log_file.name}")
            with contextlib.suppress(httpx.HTTPError):
                health = httpx.get(f"{self.base}/api/v2/monitor/health", timeout=10).json()
                parts = [health.get(k) or {} for k in ("metadatabase", "scheduler", "dag_processor", "triggerer")]
                if all(p.get("status") == "healthy" for p in parts):
                    break
            time.sleep(2)
        else:
            raise RuntimeError(f"Airflow was not healthy within {timeout:.0f} s")
        passwords = json.loads((self.root / "airflow" / "simple_auth_manager_passwords.json.generated").read_text())
        token = httpx.post(
            f"{self.base}/auth/token", json={"username": "admin", "password": passwords["admin"]}, timeout=30
        ).json()["access_token"]
        self.client = httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        while self.get("/api/v2/dags/elastic_rescale", ok=(200, 404)).get("dag_id") != "elastic_rescale":
            time.sleep(2)

    def get(self, path: str, ok: tuple[int, ...] = (200,), **kwargs: Any) -> Any:
        assert self.client is not None
        response = self.client.get(path, **kwargs)
        assert response.status_code in ok, (path, response.status_code, response.text[:500])
        return response.json()

    def trigger(self, conf: dict[str, Any]) -> str:
        assert self.client is not None
        self.client.patch("/api/v2/dags/elastic_rescale", json={"is_paused": False})
        run = self.client.post("/api/v2/dags/elastic_rescale/dagRuns", json={"logical_date": None, "conf": conf})
        assert run.status_code in (200, 201), run.text[:500]
        return str(run.json()["dag_run_id"])

    def wait_run(self, run_id: str, timeout: float = 900.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.get(f"/api/v2/dags/elastic_rescale/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return str(state)
            time.sleep(1)
        raise RuntimeError(f"elastic_rescale run {run_id} did not end within {timeout:.0f} s")

    def tasks_between(self, start: float, end: float) -> list[str]:
        """Every task instance (any DAG) that ran at some moment of [start, end] (epoch seconds)."""
        found = []
        for dag in self.get("/api/v2/dags", params={"limit": 100})["dags"]:
            for run in self.get(f"/api/v2/dags/{dag['dag_id']}/dagRuns", params={"limit": 20})["dag_runs"]:
                path = f"/api/v2/dags/{dag['dag_id']}/dagRuns/{run['dag_run_id']}/taskInstances"
                for ti in self.get(path, params={"limit": 100})["task_instances"]:
                    began, ended = _epoch(ti.get("start_date")), _epoch(ti.get("end_date")) or time.time()
                    if began is not None and began < end and ended > start:
                        found.append(f"{dag['dag_id']}.{ti['task_id']}")
        return sorted(found)

    def wait_quiet(self, timeout: float = 180.0) -> None:
        """Until no task instance of any DAG runs: each switch starts from the same quiet machine, whatever the
        last one set off (``quality_report`` after a scaling event, a scheduled watch)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = self.get("/api/v2/dags/~/dagRuns/~/taskInstances", params={"state": ["running", "queued"]})
            if not busy["total_entries"]:
                return
            time.sleep(1)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        if self.client is not None:
            self.client.close()
        self.log_file.close()


def _epoch(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


class CpuSampler:
    """The machine's busy CPU seconds over time, sampled every 0.2 s, to read how much was spent in a window.

    Machine-wide, not a process tree's: a task process that starts and ends inside a switch would be missed by a
    tree's sum. The driver's own switch work is in it for both paths alike; what differs is what runs beside it.
    """

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))

    def _run(self) -> None:
        while not self.halt.wait(0.2):
            self.samples.append((time.time(), self._busy()))

    def used(self, start: float, end: float) -> float | None:
        """Busy CPU seconds between the samples just outside ``start`` and ``end``."""
        before = [c for t, c in self.samples if t <= start]
        after = [c for t, c in self.samples if t >= end]
        if not before or not after:
            return None
        return max(0.0, after[0] - before[-1])


def setup(home: Home, latency_ms: float) -> None:
    DeltaLog(home.streams).create("events", 2)
    produce(DeltaLog(home.streams), home, "events", 500, 100, seed=0)
    raw = JobConfig.load(REPO / "include/jobs/enrichment.yaml").to_dict()
    raw.update(
        process_options={"latency_ms": latency_ms}, batch={"max_records": 500, "trigger_interval": "0.5 seconds"}
    )
    create_job(home, JobConfig.from_dict(raw))


def wait_live(home: Home, version: int, timeout: float = 300.0) -> None:
    from pipelines.operations import scaling

    control = ControlPlane(home)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        beat = scaling.last_heartbeat(control, JOB)
        batch = control.checkpoints.latest_batch(JOB, version)
        if beat and beat["live"] and beat["model_version"] == version and batch is not None and batch >= 1:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the driver did not run v{version} within {timeout:.0f} s")


def window(home: Home) -> tuple[float, float, float]:
    """The last event's switch: (old query stopped, new query's first batch, downtime) on the store's clock."""
    control = ControlPlane(home)
    event = control.events.history(JOB)[-1]
    assert event.status == "verified" and event.details.get("mode") == "in-place", (event.status, event.details)
    stopped = metric_times(control, JOB, event.from_version, ("query_stopped",), since=event.started_at)
    resumed = metric_times(control, JOB, event.to_version, ("first_progress",))
    end = min(resumed)
    start = max(s for s in stopped if s <= end)
    return start, end, float(event.details["downtime_s"])


@contextlib.contextmanager
def load(home: Home, rate: int) -> Iterator[None]:
    halt = threading.Event()

    def run() -> None:
        while not halt.is_set():
            produce_at_rate(DeltaLog(home.streams), home, "events", rate, 5.0, 100, None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        halt.set()
        thread.join(timeout=30)


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2, help="rounds of (CLI up, CLI down, Airflow up, Airflow down)")
    parser.add_argument("--rate", type=int, default=300, help="records produced per second")
    parser.add_argument("--latency-ms", type=float, default=1.0, help="the job's per-record work")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    if not 1 <= args.pairs <= 10:
        parser.error("--pairs must be 1 to 10")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-airflow-switch-") as tmp:
        root = Path(tmp)
        home = Home(root / "home")
        setup(home, args.latency_ms)
        log(f"starting the README's Airflow (scripts/airflow.sh) on a home of its own in {root} ...")
        airflow = Airflow(root, home)
        sampler = CpuSampler()
        try:
            airflow.wait_ready()
            log(f"Airflow up at {airflow.base}; a continuous driver on {args.master}, {args.rate} records/s ...")
            with load(home, args.rate):
                launcher.run(home, JOB, available_now=False, master=args.master, detach=True)
                wait_live(home, 1)
                env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
                for round_ in range(args.pairs):
                    for path in ("cli", "airflow"):
                        for before, after in MOVES:
                            reason = f"bench {path} {before}->{after}"
                            airflow.wait_quiet()
                            if path == "cli":
                                argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), "--json"]
                                done = subprocess.run(
                                    [*argv, "rescale", JOB, "--factor", str(after), "--reason", reason],
                                    cwd=REPO,
                                    env=env,
                                    capture_output=True,
                                    text=True,
                                    timeout=900,
                                )
                                assert done.returncode == 0, done.stderr[-2000:]
                            else:
                                run_id = airflow.trigger({"job": JOB, "factor": after, "reason": reason})
                                state = airflow.wait_run(run_id)
                                assert state == "success", f"elastic_rescale {run_id} ended {state}"
                            start, end, downtime = window(home)
                            cpu = sampler.used(start, end)
                            tasks = airflow.tasks_between(start, end)
                            rows.append(
                                {
                                    "path": path,
                                    "move": f"{before}->{after}",
                                    "downtime_s": downtime,
                                    "busy_cpu_s": cpu,
                                    "tasks": tasks,
                                }
                            )
                            log(
                                f"  round {round_ + 1} {path:>7} {before}->{after}: downtime {downtime:.2f} s, "
                                f"the machine busy {cpu if cpu is None else round(cpu, 2)} CPU-s in it; "
                                f"tasks in it: {', '.join(tasks) or 'none'}"
                            )
                            wait_live(home, ControlPlane(home).job_models.active_version(JOB))
                launcher.stop(home, JOB, timeout=120)
        finally:
            sampler.halt.set()
            launcher.kill(home, JOB)
            airflow.stop()
        verdict = verify_job(home, JOB, sequence="seq")
        log(f"  whole run: {verdict.summary().splitlines()[0]}")
        if not verdict.ok:
            return 1
    by_path = {p: [r["downtime_s"] for r in rows if r["path"] == p] for p in ("cli", "airflow")}
    cpu = {p: [r["busy_cpu_s"] for r in rows if r["path"] == p and r["busy_cpu_s"] is not None] for p in by_path}
    print(f"\n{'path':<8} {'switches':>8} {'median s':>9} {'worst s':>8} {'busy CPU-s in switch':>21}")
    for p, figures in by_path.items():
        spent = statistics.median(cpu[p]) if cpu[p] else float("nan")
        print(f"{p:<8} {len(figures):>8} {statistics.median(figures):>9.2f} {max(figures):>8.2f} {spent:>21.2f}")
    ratio = statistics.median(by_path["airflow"]) / statistics.median(by_path["cli"])
    print(f"\nAirflow / CLI (median downtime): {ratio:.2f}x")
    figures = {
        "cli_median_s": round(statistics.median(by_path["cli"]), 3),
        "airflow_median_s": round(statistics.median(by_path["airflow"]), 3),
        "airflow_vs_cli": round(ratio, 2),
        "busy_cpu_in_airflow_switch_s": round(statistics.median(cpu["airflow"]), 2) if cpu["airflow"] else None,
        "busy_cpu_in_cli_switch_s": round(statistics.median(cpu["cli"]), 2) if cpu["cli"] else None,
    }
    print(json.dumps({"bench": "airflow_switch", "figures": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
