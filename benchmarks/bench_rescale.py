"""Benchmark of a rescale's downtime: the in-place model switch against a redeploy, in the same run.

A producer appends keyed records continuously while the job runs. Two ways to move it to a new factor:

* **in place** (what the platform does): a live driver in a spark-submit application notices the
  activation, drains its source, stops its query at a batch boundary, carries the old model's checkpoints
  forward and starts the new model's query in the same Spark application;
* **redeploy** (the baseline, what restarting a Spark job means): stop the driver at a batch boundary
  (``pipelines stop``), activate the new model, start a new driver with spark-submit.

Downtime, for both, is what the drivers record in the metrics table: from the old query's stop to the new
query's first batch with data. Both modes move the same live job, one after the other: ``--steps`` rescales
in place (1 -> 2 -> 4 -> 2 -> 1 ...), then ``--steps`` redeploys going on from there, so the two are measured on
the same job, input and machine minutes apart, and the redeploy baseline starts from the driver the in-place
steps left running instead of a Spark application of its own. The figures are the median and the worst, and
the ratio redeploy / in place. Every in-place rescale is followed by the data-quality checks over its window,
and the whole run (both modes) by the checks over every record (no loss, no duplicates, order), which must pass.

``--input kafka`` runs the same on a real Apache Kafka broker (one KRaft node on 127.0.0.1), ``--input kinesis`` on
kinesis-mock (``testbed.servers``), each started and stopped by the run; the embedded log is the default.

    python -m benchmarks.bench_rescale [--rate 400] [--steps 4] [--master local[4]] [--input deltalog|kafka|kinesis]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pipelines.control import ControlPlane
from pipelines.core.metric_names import SWITCH_PHASES
from pipelines.demo.producer import produce
from pipelines.demo.run import Producer
from pipelines.jobs.config import JobConfig
from pipelines.operations import scaling
from pipelines.operations.jobs import create_job
from pipelines.planning import plan_next, save
from pipelines.quality.verify import verify_job
from pipelines.runtime import launcher
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem
from pipelines.systems.deltalog import DeltaLog
from pipelines.usage import Parser

FACTORS = [2, 4, 2, 1, 2, 4, 2, 1]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


INPUTS = ("deltalog", "kafka", "kinesis")
KEYS = 100


class Producing(Protocol):
    """The demos' producers (``demo.run.Producer``, ``demo.kinesis.KinesisProducer``): a thread and its halt."""

    halt: threading.Event

    def start(self) -> None: ...


@dataclass
class Input:
    """The job's input: its system, the job's ``inputs``/``systems`` sections, and a producer of keyed events."""

    system: InputSystem
    sections: dict[str, Any]
    producer: Producing


@contextlib.contextmanager
def job_input(kind: str, home: Home, rate: int) -> Iterator[Input]:
    """The input ``kind`` with a 2-partition ``events`` stream holding a first 500 records; its server, if any, is
    started here and stopped on the way out."""
    if kind == "kinesis":
        from pipelines.demo.kinesis import KinesisProducer
        from pipelines.systems.kinesis import KinesisSystem
        from testbed.servers.kinesis_emulator import KinesisEmulator

        with KinesisEmulator() as endpoint:
            settings = {"endpoint_url": endpoint, "region": "us-east-1"}
            kinesis = KinesisSystem(settings)
            kinesis.create("events", 2)
            producer = KinesisProducer(kinesis, rate, KEYS)
            kinesis.produce("events", producer.batch(500))
            producer.produced += 500
            sections = {"inputs": [{"system": "kinesis", "stream": "events"}], "systems": {"kinesis": settings}}
            try:
                yield Input(kinesis, sections, producer)
            finally:
                kinesis.close()
        return
    if kind == "kafka":
        from pipelines.systems.kafka import KafkaSystem
        from testbed.servers.kafka_broker import KafkaBroker

        with KafkaBroker() as broker:
            brokers: dict[str, Any] = {"bootstrap_servers": broker.bootstrap, "timeout_ms": 5000}
            system: InputSystem = KafkaSystem(brokers)
            sections = {"inputs": [{"system": "kafka", "stream": "events"}], "systems": {"kafka": brokers}}
            system.create("events", 2)
            produce(system, home, "events", 500, KEYS, seed=0)
            try:
                yield Input(system, sections, Producer(home, rate, KEYS, system))
            finally:
                system.close()
        return
    system = DeltaLog(home.streams)
    system.create("events", 2)
    produce(system, home, "events", 500, KEYS, seed=0)
    yield Input(system, {}, Producer(home, rate, KEYS, system))


def create(home: Home, sections: dict[str, Any]) -> None:
    raw = JobConfig.load(Path(__file__).resolve().parents[1] / "include/jobs/enrichment.yaml").to_dict()
    raw.update(process_options={"latency_ms": 1}, batch={"max_records": 500, "trigger_interval": "0.5 seconds"})
    raw.update(sections)
    create_job(home, JobConfig.from_dict(raw))


def wait_live(home: Home, version: int, timeout: float = 240.0) -> None:
    control = ControlPlane(home)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        beat = scaling.last_heartbeat(control, "enrichment")
        if beat and beat["live"] and beat["model_version"] == version:
            batch = control.checkpoints.latest_batch("enrichment", version)
            if batch is not None and batch >= 1:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the driver did not run v{version} within {timeout:.0f}s")


def phases(home: Home, old: int, new: int) -> tuple[float, float]:
    """(old query stopped -> new query started, new query started -> its first batch with data), seconds."""
    control = ControlPlane(home)

    def times(version: int, metric: str) -> list[float]:
        frame = control.metrics.read("enrichment", model_version=version, metrics=[metric])
        return [float(v) for v in frame["value"]] if len(frame) else []

    started = min(times(new, "query_started"))
    resumed = min(times(new, "first_progress") or [started])
    stopped = max(t for t in times(old, "query_stopped") if t <= started)
    return started - stopped, resumed - started


def switch_phases(home: Home, version: int, timeout: float = 60.0) -> dict[str, float]:
    """The driver's record of where the switch into ``version`` went (``pipelines.runtime.switch_timeline``)."""
    control = ControlPlane(home)
    end = time.monotonic() + timeout
    while True:
        frame = control.metrics.read("enrichment", model_version=version, metrics=list(SWITCH_PHASES))
        if len(frame) >= len(SWITCH_PHASES):
            return {str(m): float(v) for m, v in zip(frame["metric"], frame["value"], strict=True)}
        if time.monotonic() > end:
            raise RuntimeError(f"v{version} recorded no switch phases within {timeout:.0f}s")
        time.sleep(0.5)


def in_place(home: Home, factors: list[int]) -> tuple[list[float], list[dict[str, float]]]:
    """Each factor by the platform's rescale of the live driver; the driver is left running."""
    figures, breakdowns = [], []
    for factor in factors:
        result = scaling.run_all(home, scaling.ScalingRequest("enrichment", factor, "bench"), say=lambda m: None)
        assert result["status"] == "verified", result
        figures.append(result["downtime_s"])
        version = ControlPlane(home).job_models.active_version("enrichment")
        assert version is not None
        wait_live(home, version)
        breakdowns.append(switch_phases(home, version))
        shown = ", ".join(f"{name.removeprefix('switch.')} {breakdowns[-1][name]:.2f}" for name in SWITCH_PHASES)
        log(f"  in place -> factor {factor}: downtime {result['downtime_s']:.2f}s ({shown}), "
            f"replayed {result['records_replayed']}")  # fmt: skip
    return figures, breakdowns


def redeploy(home: Home, master: str, factors: list[int]) -> list[float]:
    """Each factor by stopping the live driver at a batch boundary and starting a new Spark application."""
    figures = []
    control = ControlPlane(home)
    for factor in factors:
        old = control.job_models.active_version("enrichment")
        assert launcher.stop(home, "enrichment", timeout=120)
        plan = plan_next(home, "enrichment", factor=factor)
        save(home, plan, "bench redeploy", activate=True)
        launcher.run(home, "enrichment", available_now=False, master=master, detach=True)
        wait_live(home, plan.model.version)
        assert old is not None
        switch, first = phases(home, old, plan.model.version)
        figures.append(switch + first)
        log(f"  redeploy -> factor {factor}: downtime {figures[-1]:.2f}s (stop -> new query {switch:.2f}s)")
    return figures


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=400, help="records produced per second")
    parser.add_argument("--steps", type=int, default=4, help="rescales per mode (at most 8)")
    parser.add_argument("--master", default="local[4]")
    parser.add_argument("--input", choices=INPUTS, default="deltalog", help="the job's input system")
    args = parser.parse_args()
    if not 1 <= args.steps <= len(FACTORS):
        parser.error(f"--steps must be 1 to {len(FACTORS)}")
    factors = [FACTORS[i % len(FACTORS)] for i in range(2 * args.steps)]
    results: dict[str, list[float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-rescale-") as tmp,
        job_input(args.input, Home(Path(tmp) / "job"), args.rate) as source,
    ):
        home = Home(Path(tmp) / "job")
        create(home, source.sections)
        producer = source.producer
        producer.start()
        log(f"{args.steps} rescales in place, then {args.steps} redeploys, on {args.master}, input {args.input}, "
            f"{args.rate} records/s ...")  # fmt: skip
        try:
            launcher.run(home, "enrichment", available_now=False, master=args.master, detach=True)
            wait_live(home, 1)
            results["in place"], breakdowns = in_place(home, factors[: args.steps])
            results["redeploy"] = redeploy(home, args.master, factors[args.steps :])
            launcher.stop(home, "enrichment", timeout=120)
        finally:
            producer.halt.set()
            launcher.kill(home, "enrichment")
        verdict = verify_job(home, "enrichment", sequence="seq")
        log(f"  whole run: {verdict.summary().splitlines()[0]}")
        if not verdict.ok:
            return 1
    print(f"\ninput: {args.input}\n{'mode':<10} {'rescales':>8} {'median s':>9} {'worst s':>8}")
    for mode, downtimes in results.items():
        print(f"{mode:<10} {len(downtimes):>8} {statistics.median(downtimes):>9.2f} {max(downtimes):>8.2f}")
    ratio = statistics.median(results["redeploy"]) / statistics.median(results["in place"])
    print(f"\nredeploy / in place (median downtime): {ratio:.1f}x")
    print(f"\n{'where an in-place switch goes':<28} {'median s':>9} {'worst s':>8}")
    medians = {}
    for name in SWITCH_PHASES:
        values = [b[name] for b in breakdowns]
        medians[name.removeprefix("switch.")] = round(statistics.median(values), 3)
        print(f"{name.removeprefix('switch.'):<28} {statistics.median(values):>9.2f} {max(values):>8.2f}")
    figures: dict[str, object] = {
        "input": args.input,
        "in_place_median_s": round(statistics.median(results["in place"]), 3),
        "in_place_worst_s": round(max(results["in place"]), 3),
        "redeploy_median_s": round(statistics.median(results["redeploy"]), 3),
        "redeploy_vs_in_place": round(ratio, 2),
        "in_place_phase_median_s": medians,
    }
    print(json.dumps({"bench": "rescale", "figures": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
