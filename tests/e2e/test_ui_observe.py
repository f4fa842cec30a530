"""The operator's view on the "Elastic pipelines" page, in a real headless Chromium against the running Airflow.

The job lives in the home the api-server reads (``running_airflow.pipelines_home``):
created at factor 1 and rescaled to 4 with the platform's own operation (a
real scaling event and model v2), and about 10,000 metric rows written through
``Metrics.append`` shaped as a run writes them (``pipelines.observe.synthetic``):
batches of v1 before the rescale, batches of v2 after it with one hot key
bucket. No Spark run: the page reads control-plane rows, and these are the
rows a run writes (``tests/integration/runtime/test_status.py`` checks the
same view on a real run).

The browser logs in through Airflow's own login form, opens the page, and
checks the plots (SVG with the rescale marker at its time), the per-task
table (slowest first, the hot bucket flagged) and the input. Screenshots go
to ``test-artifacts/ui/`` (gitignored; CI keeps them as artifacts).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import pytest

from pipelines.control import ControlPlane
from pipelines.demo.producer import produce
from pipelines.jobs.config import JobConfig
from pipelines.observe.synthetic import run_rows
from pipelines.operations.jobs import create_job
from pipelines.operations.scaling.start import apply_plan
from pipelines.planning import plan_next
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.e2e.airflow_fixtures import REPO, AirflowClient

JOB = "ui_observed"
STREAM = "ui_observed_events"
PAGE = "/elastic-pipelines/"
HOT = "Partition 1-2-4"
ARTIFACTS = REPO / "test-artifacts" / "ui"
METRIC_ROWS = 10_000


@pytest.fixture(scope="module")
def observed_job(running_airflow: AirflowClient) -> dict[str, Any]:
    """A job rescaled 1 -> 4, with about 10,000 metric rows around the rescale (v1 before, v2 after)."""
    home = Home(running_airflow.pipelines_home)
    log = DeltaLog(home.streams)
    log.create(STREAM, 2)
    produce(log, home, STREAM, 400, 20, seed=11)
    raw = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml").to_dict()
    raw.update(
        name=JOB,
        inputs=[{"system": "deltalog", "stream": STREAM}],
        sink={"table": f"{JOB}_out"},
        dead_letter={"table": f"{JOB}_dead"},
    )
    create_job(home, JobConfig.from_dict(raw))
    control = ControlPlane(home)
    v1 = control.job_models.active(JOB)
    apply_plan(home, plan_next(home, JOB, factor=4), "scale up for the operator's view")
    v2 = control.job_models.active(JOB)
    event = control.events.history(JOB)[-1]
    at = event.started_at.timestamp()
    before = run_rows(v1, batches=200, start=at - 200 * 5.0, every_s=5.0, records_per_batch=800, lag=400)
    after = run_rows(v2, batches=63, start=at + 1.0, every_s=1.0, records_per_batch=3200, lag=300, hot_task=HOT)
    rows = before + after
    for i in range(0, len(rows), 1000):  # a few commits; the benchmark writes one per batch
        control.metrics.append(rows[i : i + 1000])
    return {"home": home, "event": event, "rows": len(rows)}


def _login(browser: Any, client: AirflowClient) -> Any:
    """A browser context logged in through Airflow's own login form (simple auth manager)."""
    context = browser.new_context(base_url=client.base_url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(f"/auth/login?next={quote(client.base_url + PAGE)}")
    page.locator("input[name='username']").fill("admin")
    page.locator("input[name='password']").fill(client.password)
    page.get_by_role("button", name="Sign in").click()
    deadline = time.monotonic() + 60
    while not any(c["name"] == "_token" for c in context.cookies()) and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert any(c["name"] == "_token" for c in context.cookies()), "the login form did not log in"
    page.close()
    return context


def test_the_page_plots_the_rescale_and_lists_the_virtual_tasks(
    browser: Any, running_airflow: AirflowClient, observed_job: dict[str, Any]
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    event = observed_job["event"]
    context = _login(browser, running_airflow)
    try:
        page = context.new_page()
        started = time.monotonic()
        response = page.goto(PAGE)
        loaded = time.monotonic() - started
        assert response is not None and response.status == 200, response and response.text()[:2000]
        view = page.locator(f"section.job[data-job='{JOB}'] .observe")
        view.wait_for()
        timing = page.evaluate(
            "() => { const t = performance.getEntriesByType('navigation')[0];"
            " return {response: t.responseEnd - t.requestStart, load: t.loadEventEnd - t.startTime}; }"
        )
        started = time.monotonic()
        page.reload()  # the first request also built the plugin's app; this one is what an operator waits for
        view.wait_for()
        warm = time.monotonic() - started
        print(
            f"\n[ui] page with {observed_job['rows']:,} metric rows: first load {loaded:.2f} s "
            f"(navigation timing {timing}), reload {warm:.2f} s"
        )

        plots = view.locator("svg.obs-plot")
        assert plots.count() == 4
        assert [plots.nth(i).get_attribute("data-chart") for i in range(4)] == [
            "throughput",
            "lag",
            "fetch",
            "duration",
        ]
        for i in range(4):
            marker = plots.nth(i).locator(f"g.marker[data-kind='rescale'][data-event='{event.event_id}']")
            assert marker.count() == 1
            assert marker.get_attribute("data-factor") == "1→4"
            assert marker.locator("text.marker-label").text_content() == "1"  # its number in the list below
            assert "rescale ×1→×4" in (marker.locator("title").text_content() or "")
            x = float(marker.get_attribute("data-x") or "nan")
            width = float(plots.nth(i).get_attribute("width") or "0")
            assert 0 < x < width
        throughput = plots.first.locator("g.series[data-series='in']")
        assert throughput.get_attribute("data-points") == "263"  # every batch of both versions
        assert throughput.locator("polyline").count() == 1
        out = plots.first.locator("g.series[data-series='out']")  # equal to "in" all along: dashed, said so
        assert out.get_attribute("data-equal-to") == "in" and out.get_attribute("data-dashed") == "1"
        assert "out = in" in plots.first.locator("text.legend").all_text_contents()[1]
        step = view.locator("ol.obs-markers li").first
        assert step.get_attribute("value") == "1" and "rescale ×1→×4" in step.inner_text()
        assert plots.first.locator("rect.tip title").count() > 0  # tooltips over the points

        rows = view.locator("table.obs-tasks tbody tr")
        assert rows.count() == 8  # 2 partitions x factor 4
        first = rows.first
        assert first.get_attribute("data-task") == HOT and first.get_attribute("class") == "skewed"
        assert "skew" in first.locator("td").nth(6).inner_text()
        assert view.locator("table.obs-tasks tr.skewed").count() == 1
        assert first.locator("td").nth(1).inner_text() == "2 of 4"
        source = view.locator(f".obs-input[data-input='deltalog.{STREAM}']")
        assert "reachable" in source.inner_text() and source.locator("table.obs-partitions tbody tr").count() == 2

        page.screenshot(path=str(ARTIFACTS / "observe-page.png"), full_page=True)
        view.locator(".obs-plots").screenshot(path=str(ARTIFACTS / "observe-plots.png"))
        view.locator("table.obs-tasks").screenshot(path=str(ARTIFACTS / "observe-tasks.png"))
        print(f"[ui] screenshots in {ARTIFACTS}")
    finally:
        context.close()


def test_the_api_has_the_same_figures(running_airflow: AirflowClient, observed_job: dict[str, Any]) -> None:
    data = running_airflow.json("GET", "/elastic-pipelines/api/jobs", params={"job": JOB})
    (job,) = data["jobs"]
    assert job["errors"] == {}, job["errors"]
    observed = job["observe"]
    assert observed["errors"] == {} and observed["batches"] == 263
    (marker,) = observed["markers"]
    assert marker["event_id"] == observed_job["event"].event_id and (marker["from_factor"], marker["to_factor"]) == (
        1,
        4,
    )
    assert observed["tasks"][0]["task"] == HOT and observed["tasks"][0]["skewed"] is True
    assert [v["reachable"] for v in observed["inputs"]] == [True]
