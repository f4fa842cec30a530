"""``pipelines status`` on a real run: a job at factor 1, rescaled to 4, each model run on real Spark and Delta."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pipelines.control import ControlPlane
from pipelines.observe.synthetic import run_rows
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home

from .jobs import job, produce, sink
from .test_rescale import rescale

REPO = Path(__file__).resolve().parents[3]


def cli(home: Home, *args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == rc, f"{args}: rc {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def series(data: dict[str, Any], chart: str, name: str) -> list[list[float]]:
    (found,) = [s["points"] for c in data["charts"] if c["key"] == chart for s in c["series"] if s["name"] == name]
    return found


def test_status_json_shows_the_run_and_its_rescale(spark: Any, home: Home, tmp_path: Path) -> None:
    produce(home, "events", 300, 12)
    config = job(home, "observed", 1, max_records=100)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    rescale(home, config.name, 4, reason="scale up to observe")
    produce(home, "events", 300, 12)
    run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
    assert len(sink(home, config)) == 600

    data = json.loads(cli(home, "--json", "status", config.name).stdout)
    assert (data["job"], data["model_version"], data["factor"]) == (config.name, 2, 4)
    assert data["errors"] == {}, data["errors"]
    event = ControlPlane(home).events.history(config.name)[-1]
    (marker,) = data["markers"]
    assert (marker["kind"], marker["from_factor"], marker["to_factor"]) == ("rescale", 1, 4)
    assert marker["event_id"] == event.event_id and marker["at"] == event.started_at.timestamp()
    needed = series(data, "fetch", "needed")
    assert sum(v for _, v in needed) == 600  # every record once, in the batches of both versions
    assert series(data, "fetch", "fetched") == needed  # read once: nothing fetched twice
    assert len(needed) == data["batches"] >= 4  # 3 batches of 100 at factor 1, then v2's
    assert [t for t, _ in needed] == sorted(t for t, _ in needed)
    assert sum(1 for t, _ in needed if t > marker["at"]) >= 1  # v2's batches come after the marker
    durations = series(data, "duration", "duration")
    assert len(durations) == data["batches"] and all(v > 0 for _, v in durations)  # the driver's rows
    assert len(series(data, "throughput", "in")) == data["batches"]
    assert series(data, "lag", "records behind")[-1][1] == 0  # available-now read everything
    assert len(data["tasks"]) == 8 and sum(t["records"] for t in data["tasks"]) == 300  # v2's last batches
    assert {t["key_bucket"] for t in data["tasks"]} == {0, 1, 2, 3}
    assert sum(t["keys"] for t in data["tasks"]) == 12  # each of the 12 keys in one task of v2's one batch
    assert not [t for t in data["tasks"] if t["skewed"]]  # 12 keys over 8 tasks: uneven, not hot
    (events,) = data["inputs"]
    assert events["reachable"] and [p["records_behind"] for p in events["partitions"]] == [0, 0]

    newest, first = ControlPlane(home).drivers.latest(config.name)  # one driver per run_job, each stopped cleanly
    assert (newest.state, first.state, newest.model_version, first.model_version) == ("stopped", "stopped", 2, 1)
    assert newest.app_id == spark.sparkContext.applicationId and newest.pid == os.getpid()
    assert newest.batch_id is not None and newest.batch_id >= 0
    assert not data["driver"]["running"] and "stopped cleanly" in data["driver"]["summary"]

    report = tmp_path / "report.html"
    text = cli(home, "status", config.name, "--export", str(report)).stdout
    assert f"job {config.name}: model v2, factor 4" in text and "rescale ×1→×4" in text
    assert "not running: its last driver" in text
    html = report.read_text()
    assert html.count('<svg class="obs-plot"') == 4 and f'data-event="{event.event_id}"' in html


def test_an_unknown_job_is_refused_as_the_cli_does(home: Home) -> None:
    produce(home, "events", 10, 2)
    job(home, "known", 1)
    done = cli(home, "--json", "status", "nope", rc=2)
    error = json.loads(done.stdout)
    assert error["error"] == "unknown_job" and "known" in error["message"]
    assert done.stderr.startswith("error: ")
    assert "--export writes .html or .png" in cli(home, "status", "known", "--export", "x.pdf", rc=2).stderr


def test_watch_refreshes_until_ctrl_c_and_exits_cleanly(home: Home) -> None:
    produce(home, "events", 10, 2)
    config = job(home, "watched", 2)
    control = ControlPlane(home)
    model = control.job_models.active(config.name)
    control.metrics.append(run_rows(model, batches=3, start=time.time() - 30, every_s=5.0, records_per_batch=40))
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), "status", config.name, "--watch", "0.3"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        seen = ""
        assert proc.stdout is not None
        while seen.count("pipelines status watched") < 2 and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        assert seen.count("pipelines status watched") >= 2, seen
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped watching watched" in err and "Traceback" not in err
    assert "3 micro-batches" in seen


@pytest.mark.slow
def test_a_png_export_is_the_report_rendered_by_chromium(home: Home, tmp_path: Path) -> None:
    """The test tooling's Chromium and playwright (scripts/setup.sh) rasterise the same self-contained HTML."""
    produce(home, "events", 10, 2)
    config = job(home, "pictured", 2)
    control = ControlPlane(home)
    model = control.job_models.active(config.name)
    control.metrics.append(run_rows(model, batches=5, start=time.time() - 60, every_s=10.0, records_per_batch=80))
    picture = tmp_path / "status.png"
    cli(home, "status", config.name, "--export", str(picture))
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 1000 and height >= 600  # the four plots and the tables, not an empty page
