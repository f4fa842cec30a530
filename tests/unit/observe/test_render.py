"""The HTML fragment, the export page and the terminal view, drawn from the same JSON-able observation."""

from __future__ import annotations

import json

from pipelines.core.groupers import plan_job_model
from pipelines.core.ssp import SystemStream
from pipelines.observe.render import export_page, html_section, sparkline, text
from pipelines.observe.series import batches, charts, marker
from pipelines.observe.synthetic import run_rows
from pipelines.observe.tasks import task_table


def observation() -> dict:
    model = plan_job_model("j", 2, {SystemStream("deltalog", "events"): 2}, factor=2)
    rows = run_rows(
        model, batches=5, start=1000.0, every_s=2.0, records_per_batch=500, lag=40, hot_task="Partition 0-1-2"
    )
    points = batches(rows)
    event = {
        "event_id": "abc123",
        "kind": "rescale",
        "status": "verified",
        "started_at": 999.0,
        "finished_at": 1001.0,
        "from_factor": 1,
        "to_factor": 2,
        "details": {"downtime_s": 1.5},
    }
    obs = {
        "job": "j",
        "model_version": 2,
        "factor": 2,
        "window": {"minutes": 60, "since": "a", "until": "b"},
        "batches": len(points),
        "latest": points[-1].to_dict(),
        "charts": [c.to_dict() for c in charts(points)],
        "markers": [marker(event).to_dict()],
        "tasks": [t.to_dict() for t in task_table(model, {}, rows, points)],
        "inputs": [
            {"input": "kafka.orders", "system": "kafka", "stream": "orders", "reachable": False, "error": "timeout"},
            {
                "input": "deltalog.events",
                "system": "deltalog",
                "stream": "events",
                "reachable": True,
                "partitions": [
                    {"partition": 0, "earliest": "0", "end": "9", "checkpoint": "4", "records_behind": 5, "files": 37}
                ],
                "details": {"retention_ms": 3 * 86_400_000},  # its own (stream alter --retention)
            },
        ],
        "errors": {},
    }
    return json.loads(json.dumps(obs))  # what the API serves and the page renders


def test_the_html_section_has_every_plot_its_markers_and_the_task_rows() -> None:
    html = html_section(observation())
    assert html.count('<svg class="obs-plot"') == 4  # throughput, lag, fetch, duration
    assert html.count('class="marker" data-kind="rescale" data-event="abc123" data-number="1"') == 4
    assert '<li value="1"><span class="pill info" data-event="abc123" data-number="1">' in html
    assert html.count("<tr data-task=") == 4
    assert 'class="skewed"' in html and "skew " in html
    assert "built-in method" not in html, "a task row is a dict: its keys count is t['keys'], not the dict's method"
    assert "unreachable" in html and "timeout" in html
    partitions = html.split('data-input="deltalog.events"', 1)[1]  # a partitioned input: its partitions, no shards
    assert 'class="obs-partitions"' in partitions and "obs-shards" not in partitions and "<td>5</td>" in partitions
    assert "<th>files</th>" in partitions and '<td class="files">37</td>' in partitions, "the embedded log's files"
    assert "retention 3d" in partitions, "the stream's own retention among its facts"
    kafka_like = html_section(
        {**observation(), "inputs": [{**observation()["inputs"][1], "partitions": [{"partition": 0}]}]}
    )
    assert "<th>files</th>" not in kafka_like, "no files column for an input that has none"
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")


def test_the_export_is_self_contained() -> None:
    page = export_page(observation())
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "<script" not in page and "<link" not in page and "src=" not in page


def test_the_terminal_view_names_the_steps_and_the_slowest_task() -> None:
    view = text(observation())
    assert "1. 1970-01-01 00:16:39  rescale ×1→×2 · down 1.5 s" in view
    tasks = view.split("virtual tasks")[1].splitlines()
    assert tasks[2].startswith("!") and "Partition 0-1-2" in tasks[2]
    assert "input kafka.orders: UNREACHABLE: timeout" in view
    assert "input deltalog.events: 1 partition(s), retention 3d" in view


def test_sparkline_scales_to_its_maximum() -> None:
    assert sparkline([0, 1, 2, 4]) == "▁▃▅█" and sparkline([]) == ""


def test_spark_faults_show_in_the_terminal_and_the_html_only_when_there_are_some() -> None:
    clean = observation()
    assert "Spark faults" not in text(clean) and "Spark faults" not in html_section(clean)
    lost = {**clean, "faults": ["v2 batch 4: 3 tasks retried, 1 executor lost"]}
    assert "  v2 batch 4: 3 tasks retried, 1 executor lost" in text(lost).splitlines()
    html = html_section(lost)
    assert '<ul class="obs-faults">' in html and "v2 batch 4: 3 tasks retried, 1 executor lost" in html
