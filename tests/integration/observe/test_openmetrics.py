"""``pipelines metrics``: every job's signals as OpenMetrics, printed and served, read by Prometheus' own parser.

A job with real metric rows (as its sink commits them), a scaling step, a
held lock; the CLI in a subprocess, as an operator (or a Prometheus scrape)
meets it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock
from pipelines.control.scaling_events import EventStatus
from pipelines.operations.scaling.start import apply_plan
from pipelines.planning import plan_next
from pipelines.storage.home import Home
from tests.unit.observe.test_openmetrics import parsed

from ..operations.test_autosize import JOB, PARTITIONS, Load, make_job, write_batches

REPO = Path(__file__).resolve().parents[3]
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def cli(home: Home, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``pipelines ARGS`` on ``home`` (not the session's PIPELINES_HOME)."""
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    return [sys.executable, "-m", "pipelines", "--home", str(home.root), *args], env


def test_metrics_print_and_serve_each_jobs_lag_rate_factor_tasks_driver_and_last_switch(home: Home) -> None:
    config = make_job(home, 1)
    now = ControlPlane(home).clock.now()
    loads = [Load(process_s=0.5, records=100, lag=400.0 + 10 * i) for i in range(5)]
    write_batches(home, loads, start=now - timedelta(seconds=10), wall_s=2.0)  # five batches in the last minute

    argv, env = cli(home, "metrics")
    printed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    assert printed.rstrip().endswith("# EOF")
    got = parsed(printed)
    tasks = PARTITIONS  # factor 1: one virtual task per partition
    assert got["pipelines_job_elasticity_factor"] == {JOB: 1} and got["pipelines_job_virtual_tasks"] == {JOB: tasks}
    assert got["pipelines_job_model_version"] == {JOB: 1}
    assert got["pipelines_job_lag_records"] == {JOB: loads[-1].lag}  # the last batch's, over both partitions
    records = sum(load.records * tasks for load in loads)
    assert abs(got["pipelines_job_input_records_per_second"][JOB] - records / 60) < 1e-6
    assert got["pipelines_job_driver_up"] == {JOB: 0}  # no driver beats: a continuous job's alert would fire
    assert got["pipelines_job_driver_expected"] == {JOB: int(config.trigger == "continuous")}
    assert got["pipelines_job_scaling"] == {JOB: 0} and got["pipelines_job_read_error"] == {JOB: 0}
    assert "pipelines_job_last_switch_downtime_seconds" not in got  # never switched: left out, not 0
    assert "pipelines_job_lag_seconds" not in got  # the embedded log counts records, not time

    served, env = cli(home, "metrics", "--serve", "--port", "0")
    server = subprocess.Popen(served, env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()  # type: ignore[union-attr]
        assert "serving OpenMetrics of every job" in line, line
        url = line.split(" on ", 1)[1].split(" ")[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), url
        scraped = httpx.get(url, headers={"Accept": OPENMETRICS}, timeout=30)
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("application/openmetrics")
        assert parsed(scraped.text)["pipelines_job_lag_records"] == {JOB: loads[-1].lag}

        # a rescale with a measured switch, and a scaling step under way: the next scrape shows both
        event = apply_plan(home, plan_next(home, JOB, factor=2), "metrics test")
        control = ControlPlane(home)
        control.events.record(event.finish(EventStatus.VERIFIED, at=control.clock.now(), downtime_s=1.25))
        ScalingLock(home).acquire(JOB, "cli:someone:1:x", "an expansion")
        again = parsed(httpx.get(url, headers={"Accept": OPENMETRICS}, timeout=30).text)
        assert again["pipelines_job_elasticity_factor"] == {JOB: 2}
        assert again["pipelines_job_virtual_tasks"] == {JOB: 2 * tasks}
        assert again["pipelines_job_model_version"] == {JOB: 2}
        assert again["pipelines_job_last_switch_downtime_seconds"] == {JOB: 1.25}
        assert again["pipelines_job_scaling"] == {JOB: 1}
        assert abs(again["pipelines_job_last_switch_timestamp_seconds"][JOB] - control.clock.now_s()) < 120
    finally:
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0  # Ctrl-C stops it cleanly
        server.stderr.close()  # type: ignore[union-attr]


def test_a_port_out_of_range_or_taken_is_one_error_line_and_exit_2(home: Home) -> None:
    make_job(home, 1)
    argv, env = cli(home, "metrics", "--serve", "--port", "70000")
    bad = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "must be a whole number at most 65,535" in bad.stderr, bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv, env = cli(home, "metrics", "--serve", "--port", str(port))
        busy = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert busy.returncode == 2, busy.stderr
    said = f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    assert busy.stderr.strip().splitlines() == [said]
    assert busy.stdout == ""
