"""Every benchmark still runs, at a size that proves only that.

Benchmarks are run by hand, rarely, and against a code base that moves under
them: ``bench_rescale`` went days failing with a ``TypeError`` before its first
rescale because the demo's producer had gained an argument. Each one here runs
as its README says (``python -m benchmarks.NAME``), with tiny inputs, and must
end with its JSON line. The figures are not judged (timings at this size mean
nothing, and performance is the benchmarks' business); what the benchmarks
verify themselves (no loss, no reordering, data-quality verdicts) is, since a
benchmark exits non-zero when those fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

RUNS = {
    "core": "--partitions 100 --factor 4 --records 1000 --containers 8",
    "runtime": "--records 800 --keys 40 --factors 1,2 --latency-ms 1 --max-records 200 --overhead-records 1000 "
    "--cheap-max-records 500 --fixed-batches 2 --no-warm-up",
    "rescale": "--steps 1 --rate 100",
    "kinesis": "--records 1000 --reshards 1",
    "quality": "--rows 5000 --keys 200",
    "adjunct": "--entries 5000 --lookups 5000 --batch 1000",
    "ui": "--rows 200 --repeat 1",
    "control": "--batches 100 --samples 3 --metric-batches 2000 --store-batches 2000",
    "streams": "--commits 30 --records 10",
    "state": "--keys 300 --steps 1 --rate 40 --latency-ms 0",
    "state_size": "--keys 3000 --baseline-keys 300 --records 200 --memory 4g",
}


KAFKA_RUN = "--cheap-records 2000 --slow-records 200 --keys 50 --master local[4]"
"""On the session's broker (``--bootstrap-servers``), not one of its own: a second broker's start is most of what the
benchmark would cost at this size."""


def run(bench: str, tmp_path: Path, args: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    env["TMPDIR"] = str(tmp_path)  # whatever a benchmark leaves behind goes with the test's folder
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.bench_{bench}", *(args or RUNS[bench]).split()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert done.returncode == 0, f"bench_{bench} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    last = done.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    assert result["bench"] == bench
    assert result["figures"], f"bench_{bench} printed no figures"
    return result["figures"]


@pytest.mark.parametrize("bench", sorted(RUNS))
def test_every_benchmark_runs_and_ends_with_its_json_line(bench: str, tmp_path: Path) -> None:
    figures = run(bench, tmp_path)
    if bench == "runtime":  # what the runtime benchmark proves at any size
        assert figures["order_violations"] == 0
        assert figures["fetch_amplification_f8"] <= 1.25
    if bench == "rescale":
        assert figures["in_place_median_s"] > 0 and figures["redeploy_median_s"] > 0


def test_the_kafka_benchmark_runs_on_a_broker_that_is_already_up(kafka_broker: Any, tmp_path: Path) -> None:
    figures = run("kafka", tmp_path, f"{KAFKA_RUN} --bootstrap-servers {kafka_broker.bootstrap}")
    assert figures["cheap_f1_kafka_rps"] > 0 and figures["speedup_f8_vs_f1_kafka"] > 0
