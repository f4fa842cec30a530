"""The GX layer on a real sink: a clean run passes at factors 1 and 4, a seeded-fault copy fails, by name."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pipelines.cli import main as cli
from pipelines.control import ControlPlane
from pipelines.control.scaling_events import EventStatus, ScalingEvent
from pipelines.quality.report import run_quality, validate_window
from pipelines.quality.verify import load_window
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home

from ..runtime.jobs import job, produce


def test_clean_runs_pass_and_a_seeded_fault_copy_fails(spark, home: Home) -> None:
    produce(home, "events", 240, 24, bad_every=61)
    for factor in (1, 4):
        config = job(home, f"q{factor}", factor, max_records=120)
        run_job(spark, home, config.name, available_now=True, progress=lambda m: None)
        report = run_quality(home, config.name, sequence="seq")
        assert report.success, report.summary()
        assert {r["check"] for r in report.results} == {
            "no_loss",
            "no_duplicates",
            "key_order",
            "routing",
            "dead_letters",
            "partitions_read",
        }
        assert next(r for r in report.results if r["check"] == "dead_letters")["observed"] == 3
    assert report.docs_index is not None and Path(report.docs_index).exists()

    # seeded faults on a copy of the factor-4 sink: a dropped row, two records of one key swapped
    window = load_window(home, "q4")
    rows = window.rows.sort_values(["model_version", "batch_id", "task_seq"]).reset_index(drop=True)
    dropped = rows.iloc[10]
    rows = rows.drop(index=10)
    key = rows["event_key"].iloc[0]
    a, b = rows.index[rows["event_key"] == key][:2]
    rows.loc[[a, b], ["batch_id", "task_seq"]] = rows.loc[[b, a], ["batch_id", "task_seq"]].to_numpy()
    window.rows = rows
    window.window_id = "run:seeded-faults"
    bad = validate_window(home, window, sequence="seq")
    assert not bad.success
    by_check = {r["check"]: r for r in bad.results}
    assert not by_check["no_loss"]["success"] and by_check["no_loss"]["observed"] == 1
    assert f"events/{dropped['partition']}@{dropped['offset']}" in by_check["no_loss"]["examples"]
    assert not by_check["key_order"]["success"] and f"key {key}: seq 1 then seq 0" in by_check["key_order"]["examples"]
    assert by_check["no_duplicates"]["success"] and by_check["routing"]["success"]

    results = ControlPlane(home).dq_results.read("q4")
    assert set(results["window"]) == {"run:v1", "run:seeded-faults"}
    assert len(results) == 12 and results["success"].sum() == 10  # 6 checks per window, 2 failed
    assert list((home.root.local_path() / "quality" / "docs" / "validations").rglob("*.html")), (
        "one Data Docs page per validation"
    )

    # the CLI: a clean run exits 0 and prints the docs index; an event window of the same job works too
    out, err = io.StringIO(), io.StringIO()
    assert cli(["--home", str(home.root), "verify", "q4", "--sequence", "seq"], out, err) == 0, err.getvalue()
    assert "PASS" in out.getvalue() and "index.html" in out.getvalue()
    event = ScalingEvent.start("q4", "rescale", from_version=1, to_version=1).finish(EventStatus.VERIFIED)
    ControlPlane(home).events.record(event)
    assert cli(["--home", str(home.root), "verify", "q4", "--event", event.event_id[:8]], out, err) == 0


@pytest.mark.slow
def test_cli_verify_fails_with_exit_2_naming_the_offender(home: Home, monkeypatch) -> None:
    """No Spark: a window whose sink lost a record, through the CLI."""
    from pipelines.quality import report as report_module
    from pipelines.quality.synthetic import synthetic_window
    from pipelines.quality.verify import Window

    expected, rows, dead = synthetic_window(200, partitions=2, factor=4, keys=10, batch=50)
    lost = rows.iloc[17]
    window = Window("synthetic", "run:test", expected, rows.drop(index=17), dead, {1: 4})
    monkeypatch.setattr(report_module, "load_window", lambda home, job, event=None: window)
    out, err = io.StringIO(), io.StringIO()
    assert cli(["--home", str(home.root), "verify", "synthetic"], out, err) == 2
    assert f"events/{lost['partition']}@{lost['offset']}" in out.getvalue()
    assert "error: data quality of job synthetic" in err.getvalue()
    assert isinstance(ControlPlane(home).dq_results.read("synthetic"), pd.DataFrame)


def test_importing_the_checks_under_a_root_logger_at_info_logs_nothing_of_great_expectations() -> None:
    """An Airflow task's root logger is at INFO: Great Expectations' import chatter (209 lines) buried the verdict."""
    code = "import logging; logging.basicConfig(level=logging.INFO); import pipelines.quality.expectations"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "great_expectations" not in done.stderr, done.stderr[:2000]
