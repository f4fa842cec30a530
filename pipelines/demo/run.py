"""The end-to-end demo on the embedded default: one job through scale-up, expansion and scale-down.

Each step produces more keyed events, changes the job (rescale, or partition
expansion absorbed with GroupByPartitionFixedTaskNum), processes everything
available with the job's active model, and verifies the whole sink against the
input: no record lost, none duplicated, every key in order, every row routed to
its key bucket's virtual task. Same operations the CLI and Airflow run.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

from pipelines.control.home import Home
from pipelines.control.tables import ControlPlane
from pipelines.demo.producer import produce
from pipelines.jobs.config import JobConfig
from pipelines.jobs.registry import create_job
from pipelines.operations.rescale import apply_rescale, plan_rescale
from pipelines.quality.report import run_quality
from pipelines.runtime.driver import run_job
from pipelines.systems.deltalog import DeltaLog

JOB_CONFIG = "include/jobs/enrichment.yaml"
STEPS: list[tuple[str, int, int | None]] = [  # (step, factor, expand the input to this many partitions)
    ("start at factor 1", 1, None),
    ("scale up to 4", 4, None),
    ("expand input 2 -> 4", 4, 4),
    ("scale down to 2", 2, None),
]


@dataclass
class StepResult:
    step: str
    factor: int
    partitions: int
    tasks: int
    records: int
    seconds: float
    verdict: Any  # the whole run's
    passed: bool  # the whole run's and this step's scaling window's validations

    def row(self) -> list[str]:
        v = self.verdict
        return [
            self.step,
            str(self.factor),
            str(self.partitions),
            str(self.tasks),
            str(self.records),
            f"{self.records / self.seconds:,.0f}" if self.seconds else "-",
            "ok" if not v.lost else f"LOST {v.lost}",
            "ok" if not v.duplicates else f"DUP {v.duplicates}",
            "ok" if not v.order_violations else f"BAD {v.order_violations}",
            "ok" if not v.misrouted else f"BAD {v.misrouted}",
        ]


def run_demo(
    home: Home,
    *,
    records: int = 2000,
    keys: int = 100,
    latency_ms: float = 2.0,
    master: str = "local[8]",
    say: Any = print,
) -> list[StepResult]:
    from pipelines.runtime.session import build_session

    if home.root.exists():
        shutil.rmtree(home.root)
    log = DeltaLog(home.streams)
    log.create("events", 2)
    base = JobConfig.load(JOB_CONFIG).to_dict()
    base["process_options"] = {"latency_ms": latency_ms}
    config = JobConfig.from_dict(base, origin=JOB_CONFIG)
    say(f"home: {home.root}\nstarting Spark ({master}) ...")
    spark = build_session(master, app_name="pipelines-demo")
    results = []
    docs = None
    try:
        for step, factor, expand_to in STEPS:
            say(f"\n== {step}")
            produce(log, home, "events", records, keys, seed=len(results))
            if expand_to is not None:
                log.expand("events", expand_to)
                produce(log, home, "events", records, keys, seed=100 + len(results))
            if not results:
                create_job(home, JobConfig.from_dict({**config.to_dict(), "elasticity_factor": factor}))
            else:
                grouper = "GroupByPartitionFixedTaskNum" if expand_to else None
                plan = plan_rescale(home, config.name, factor, grouper=grouper)
                apply_rescale(home, plan, reason=step, kind="partition expansion" if expand_to else "rescale")
            model = ControlPlane(home).active_model(config.name)
            before = _processed(home, config.name)
            started = time.monotonic()
            run_job(spark, home, config.name, available_now=True, progress=lambda m: say("  " + m))
            seconds = time.monotonic() - started
            events = ControlPlane(home).scaling_events(config.name)
            # verify the whole run, and the scaling step's own window, with Great Expectations
            reports = [run_quality(home, config.name, sequence="seq")]
            if events:
                reports.append(run_quality(home, config.name, events[-1].event_id, sequence="seq"))
            docs = reports[0].docs_index
            partitions = sum(model.partitions().values())
            result = StepResult(
                step,
                factor,
                partitions,
                model.task_count,
                _processed(home, config.name) - before,
                seconds,
                reports[0].verdict,
                all(r.success for r in reports),
            )
            results.append(result)
            for report in reports:
                say("  " + report.summary().replace("\n", "\n  "))
    finally:
        spark.stop()
    headers = [
        "step",
        "factor",
        "partitions",
        "virtual tasks",
        "records",
        "records/s",
        "no loss",
        "no dup",
        "order",
        "routing",
    ]
    say("\n" + _table(headers, [r.row() for r in results]))
    say(f"\nsink: {home.sinks / config.sink_table}\ndead letters: {home.sinks / config.dead_letter_table}")
    if results:
        say(f"data docs: {docs}")
    return results


def _processed(home: Home, job: str) -> int:
    metrics = ControlPlane(home).read_metrics(job, metrics=["records_in"])
    return int(metrics["value"].sum()) if len(metrics) else 0


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def main(home: Home, records: int, keys: int, latency_ms: float, master: str) -> int:
    results = run_demo(home, records=records, keys=keys, latency_ms=latency_ms, master=master)
    ok = all(r.passed for r in results)
    print("\ndemo " + ("passed: every step verified" if ok else "FAILED verification"), file=sys.stderr)
    return 0 if ok else 1
