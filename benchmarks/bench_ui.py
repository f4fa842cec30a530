"""The Airflow page's load time with a job's metrics: plots, per-task table and inputs over 10,000 metric rows.

``python -m benchmarks.bench_ui [--rows 10000] [--repeat 7]``

* setup: a job on the embedded log (2 partitions) created at factor 1 and
  rescaled to 4 (a real scaling event), then ``--rows`` metric rows shaped as
  a run writes them (``pipelines.observe.synthetic``), half before and half
  after the rescale, appended through ``Metrics.append`` one micro-batch per
  commit, as the sink does (so the reader sees one file per batch);
* measured: what the page's route does per request, server-side: read the
  control plane afresh (``collect``) and render the HTML (``render_page``);
  the JSON API's ``collect`` alone; ``pipelines status --json``'s ``observe``;
* baseline in the same run: the same page without the new sections (the
  ``observe`` hook returns nothing), i.e. the page before issue 16.

Best and median of ``--repeat`` requests each. The goal is the page with the
new sections in at most 1 s. Progress on stderr, tables on stdout, one JSON
line last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.usage import Parser

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "plugins"))  # what Airflow does for its plugins folder

from pipelines_airflow import collect  # noqa: E402
from pipelines_airflow.app import render_page  # noqa: E402

from pipelines.control import ControlPlane  # noqa: E402
from pipelines.demo.producer import produce  # noqa: E402
from pipelines.jobs.config import JobConfig  # noqa: E402
from pipelines.observe.collect import observe  # noqa: E402
from pipelines.observe.synthetic import run_rows  # noqa: E402
from pipelines.operations.jobs import create_job  # noqa: E402
from pipelines.operations.scaling.start import apply_plan  # noqa: E402
from pipelines.planning import plan_next  # noqa: E402
from pipelines.storage.home import Home  # noqa: E402
from pipelines.systems.deltalog import DeltaLog  # noqa: E402

JOB = "bench_ui"
STREAM = "bench_ui_events"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def seed(home: Home, rows: int) -> dict[str, Any]:
    log = DeltaLog(home.streams)
    log.create(STREAM, 2)
    produce(log, home, STREAM, 2000, 50, seed=7)
    raw = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml").to_dict()
    raw.update(
        name=JOB,
        inputs=[{"system": "deltalog", "stream": STREAM}],
        sink={"table": f"{JOB}_out"},
        dead_letter={"table": f"{JOB}_dead"},
    )
    create_job(home, JobConfig.from_dict(raw))
    control = ControlPlane(home)
    before = control.job_models.active(JOB)
    apply_plan(home, plan_next(home, JOB, factor=4), "scale up for the UI benchmark")
    after = control.job_models.active(JOB)
    event = control.events.history(JOB)[-1]
    at = event.started_at.timestamp()
    per_batch = {
        m.version: len(run_rows(m, batches=1, start=0, every_s=1, records_per_batch=1)) for m in (before, after)
    }
    n_before = rows // 2 // per_batch[before.version]
    n_after = (rows - n_before * per_batch[before.version]) // per_batch[after.version]
    every = 5.0
    batches = run_rows(before, batches=n_before, start=at - n_before * every, every_s=every, records_per_batch=800)
    batches += run_rows(
        after,
        batches=n_after,
        start=at + 3.0,
        every_s=every / 2,
        records_per_batch=3200,
        lag=500,
        hot_task="Partition 1-2-4",
    )
    by_batch: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in batches:
        by_batch.setdefault((r["model_version"], r["batch_id"]), []).append(r)
    say(f"appending {len(batches):,} metric rows in {len(by_batch)} commits (one per micro-batch)")
    for group in by_batch.values():
        control.metrics.append(group)
    return {"rows": len(batches), "commits": len(by_batch), "event": event.event_id}


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def main() -> None:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        home = Home(Path(tmp) / "home")
        setup = seed(home, args.rows)
        page = lambda: render_page(collect.collect(JOB, home))  # noqa: E731
        say("warming up (imports)")
        page()
        section = collect.observe
        collect.observe = lambda control, home, job: None  # type: ignore[assignment]  # the page before issue 16
        try:
            say(f"baseline: the page without the new sections, {args.repeat} requests")
            base_best, base_median, base_html = timed(page, args.repeat)
        finally:
            collect.observe = section  # type: ignore[assignment]
        say(f"the page with plots, tasks and inputs, {args.repeat} requests")
        best, median, html = timed(page, args.repeat)
        api_best, api_median, _ = timed(lambda: json.dumps(collect.collect(JOB, home)), args.repeat)
        obs_best, obs_median, obs = timed(lambda: observe(home, JOB), args.repeat)
        assert html.count('class="obs-plot"') == 4 and 'data-kind="rescale"' in html, "the page lacks the plots"
        assert 'class="obs-plot"' not in base_html
        read = sum(len(s["points"]) for c in obs["charts"] if c["key"] == "fetch" for s in c["series"][:1])
        print(f"# {setup['rows']:,} metric rows in {setup['commits']} commits; {read} batches in the window")
        print(f"{'':34} {'best':>8} {'median':>8}")
        print(f"{'page without the new sections':34} {base_best * 1000:6.0f} ms {base_median * 1000:6.0f} ms")
        print(f"{'page with plots, tasks, inputs':34} {best * 1000:6.0f} ms {median * 1000:6.0f} ms")
        print(f"{'JSON API (collect + dumps)':34} {api_best * 1000:6.0f} ms {api_median * 1000:6.0f} ms")
        print(f"{'status --json (observe)':34} {obs_best * 1000:6.0f} ms {obs_median * 1000:6.0f} ms")
        print(f"page size {len(html) / 1024:.0f} KiB (without the new sections {len(base_html) / 1024:.0f} KiB)")
        print(f"goal: page with the new sections <= 1000 ms: {'met' if median <= 1.0 else 'NOT met'}")
        figures = {
            "metric_rows": setup["rows"],
            "metric_commits": setup["commits"],
            "page_s": round(median, 4),
            "page_best_s": round(best, 4),
            "page_baseline_s": round(base_median, 4),
            "page_vs_baseline": round(median / base_median, 2),
            "api_s": round(api_median, 4),
            "observe_s": round(obs_median, 4),
            "page_kib": round(len(html) / 1024, 1),
        }
        print(json.dumps({"bench": "ui", "figures": figures}))


if __name__ == "__main__":
    main()
