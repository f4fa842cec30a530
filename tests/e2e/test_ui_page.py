"""The "Elastic pipelines" plugin page in a real headless Chromium, against the running Airflow.

The job is made with the platform's Python APIs in the home the Airflow
api-server reads (``running_airflow.pipelines_home``): created at factor 1,
rescaled to 4, and its scaling window validated. No Spark run is needed: the
page shows control-plane rows.

Chromium is Debian's (``/usr/bin/chromium``, installed by ``scripts/setup.sh``),
driven by the ``playwright`` package; ``playwright install`` is never run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipelines.control import ControlPlane
from pipelines.core.model import JobModel
from pipelines.demo.producer import produce
from pipelines.jobs.config import JobConfig
from pipelines.operations.autosize import evaluate
from pipelines.operations.jobs import create_job
from pipelines.operations.scaling.start import apply_plan
from pipelines.planning import plan_next
from pipelines.quality.report import run_quality
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.e2e.airflow_fixtures import REPO, AirflowClient


def rescale(home: Home, job: str, factor: object, reason: str = "test") -> JobModel:
    """Plan, save and activate a new factor in one go (no driver to coordinate), as a scaling event."""
    version = plan_next(home, job, factor=factor)
    apply_plan(home, version, reason)
    return version.model


JOB = "ui_enrichment"
STREAM = "ui_events"
PAGE = "/elastic-pipelines/"


@pytest.fixture(scope="module")
def rescaled_job(running_airflow: AirflowClient) -> dict[str, Any]:
    """A job in the Airflow home, created at factor 1 and rescaled to 4, with its scaling window validated."""
    home = Home(running_airflow.pipelines_home)
    log = DeltaLog(home.streams)
    log.create(STREAM, 2)
    produce(log, home, STREAM, 200, 20, seed=7)
    raw = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml").to_dict()
    raw.update(
        name=JOB,
        inputs=[{"system": "deltalog", "stream": STREAM}],
        sink={"table": f"{JOB}_out"},
        dead_letter={"table": f"{JOB}_dead"},
    )
    create_job(home, JobConfig.from_dict(raw))
    model = rescale(home, JOB, 4, reason="scale up for the UI test")
    event = ControlPlane(home).events.history(JOB)[-1]
    report = run_quality(home, JOB, event.event_id, sequence="seq", docs=False)
    decision = evaluate(home, JOB)  # the autosizer's verdict right after a rescale (recorded in autosize_decisions)
    return {"home": home, "model": model, "event": event, "report": report, "decision": decision}


STATEFUL = "ui_totals"


@pytest.fixture(scope="module")
def stateful_job(running_airflow: AirflowClient) -> dict[str, Any]:
    """A stateful job in the Airflow home whose state has two batches committed and one compaction recorded, as
    its driver's compactor records it (no Spark run: the page shows the state's tables and metric rows)."""
    from pipelines.core.hashing import key_hash
    from pipelines.state.compactor import StateCompactor
    from tests.integration.state.helpers import commit_batch

    home = Home(running_airflow.pipelines_home)
    DeltaLog(home.streams).create("ui_totals_in", 2)
    raw = JobConfig.load(REPO / "include" / "jobs" / "customer-totals.yaml").to_dict()
    raw.update(
        name=STATEFUL,
        elasticity_factor=2,
        inputs=[{"system": "deltalog", "stream": "ui_totals_in"}],
        sink={"table": f"{STATEFUL}_out"},
        dead_letter={"table": f"{STATEFUL}_dead"},
    )
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    keys = [f"customer-{i}".encode() for i in range(40)]
    for batch_id, partition in ((0, 0), (1, 1)):
        for bucket in (0, 1):
            mine = [k for k in keys if key_hash(k, 0) % 2 == bucket and int(k.split(b"-")[1]) % 2 == partition]
            commit_batch(
                home, STATEFUL, config.state[0], mine, factor=2, bucket=bucket, batch_id=batch_id * 2 + bucket,
                stream="ui_totals_in", partition=partition,
            )  # fmt: skip
    done = StateCompactor(ControlPlane(home), STATEFUL).round(force=True)
    return {"home": home, "config": config, "keys": len(keys), "compaction": done[0]}


def _context(browser: Any, client: AirflowClient, *, logged_in: bool) -> Any:
    context = browser.new_context(base_url=client.base_url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    if logged_in:  # what Airflow's login leaves in the browser: the JWT in the `_token` cookie
        context.add_cookies([{"name": "_token", "value": client.token, "url": client.base_url}])
    return context


def test_the_page_shows_the_job_its_factor_and_its_rescale(
    browser: Any, running_airflow: AirflowClient, rescaled_job: dict[str, Any], tmp_path: Path
) -> None:
    started = time.monotonic()
    context = _context(browser, running_airflow, logged_in=True)
    try:
        page = context.new_page()
        response = page.goto(PAGE)
        assert response is not None and response.status == 200, response and response.text()[:2000]
        card = page.locator(f"section.job[data-job='{JOB}']")
        card.wait_for()
        assert card.locator("h2.job-name").inner_text() == JOB
        assert card.locator(".fact.factor .v").inner_text() == "4"
        assert card.locator(".fact.model-version .v").inner_text() == f"v{rescaled_job['model'].version}"
        assert card.locator(".fact.virtual-tasks .v").inner_text() == "8"  # 2 partitions x factor 4
        assert "deltalog.ui_events: 2" in card.locator(".fact.inputs .v").inner_text()
        event_row = card.locator("table.events tbody tr").first
        cells = [c.strip() for c in event_row.locator("td").all_inner_texts()]
        assert cells[0] == "rescale" and cells[1] == "1 → 4" and cells[3] == "activated", cells
        assert "scale up for the UI test" in cells[-1], cells
        verdict = "PASS" if rescaled_job["report"].success else "FAIL"
        assert verdict in card.locator("table.dq").inner_text()
        assert card.locator(".lock").inner_text() == "no scaling lock"
        driver = card.locator(".obs-driver")  # a continuous job that never ran: marked as missing its driver
        assert driver.get_attribute("data-down") == "yes" and "DOWN: no driver" in driver.inner_text()
        assert "never ran in this home" in driver.inner_text()
        decision = card.locator("table.decisions tbody tr").first.locator("td").all_inner_texts()
        expected = rescaled_job["decision"]
        assert decision[2] == expected.action and decision[3] == f"4 → {expected.factor}", decision
        shot = tmp_path / "elastic-pipelines.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"\n[ui] page screenshot: {shot}")

        # the menu entry: the same page inside Airflow's UI (same-origin iframe, the cookie authenticates it)
        page.goto("/plugin/elastic-pipelines")
        frame = page.frame_locator("iframe[title='Elastic pipelines']")
        frame.locator(f"section.job[data-job='{JOB}'] .fact.factor .v").wait_for(timeout=120_000)
        assert frame.locator(f"section.job[data-job='{JOB}'] .fact.factor .v").inner_text() == "4"
        page.screenshot(path=str(tmp_path / "airflow-plugin-view.png"))
        print(f"[ui] in-Airflow screenshot: {tmp_path / 'airflow-plugin-view.png'}")
    finally:
        context.close()
    print(f"[ui] browser checks took {time.monotonic() - started:.1f} s")


def test_the_page_shows_a_jobs_keyed_state_per_virtual_task(
    browser: Any, running_airflow: AirflowClient, stateful_job: dict[str, Any], tmp_path: Path
) -> None:
    context = _context(browser, running_airflow, logged_in=True)
    try:
        page = context.new_page()
        response = page.goto(PAGE)
        assert response is not None and response.status == 200
        card = page.locator(f"section.job[data-job='{STATEFUL}']")
        card.wait_for()
        row = card.locator("table.obs-state tbody tr[data-state='totals']")
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        assert cells[0] == "totals" and cells[1] == str(stateful_job["keys"]), cells
        assert "40 keys, 0 expired" in cells[-1], cells  # the last compaction, from the compactor's metric rows
        tasks = card.locator("details.obs-state-tasks[data-state='totals'] tbody tr")
        named = {t.get_attribute("data-task"): int(t.locator("td").nth(1).inner_text()) for t in tasks.all()}
        assert set(named) == {"Partition 0-0-2", "Partition 0-1-2", "Partition 1-0-2", "Partition 1-1-2"}, named
        assert sum(named.values()) == stateful_job["keys"], named
        assert named == {t: k for t, (k, _) in stateful_job["compaction"].tasks.items()}
        history = card.locator("details.obs-state-history[data-state='totals'] tbody tr")
        assert history.count() == 1, "the state's history lists its one compaction"
        # text_content, not inner_text: the history sits in a closed <details>, whose cells render no text
        assert [c.strip() for c in history.first.locator("td").all_text_contents()][1:3] == ["40", "0"]
        page.screenshot(path=str(tmp_path / "keyed-state.png"), full_page=True)
        print(f"\n[ui] keyed state screenshot: {tmp_path / 'keyed-state.png'}")
    finally:
        context.close()


def test_the_json_endpoint_has_the_same_data(running_airflow: AirflowClient, rescaled_job: dict[str, Any]) -> None:
    data = running_airflow.json("GET", "/elastic-pipelines/api/jobs", params={"job": JOB})
    assert data["home"] == str(rescaled_job["home"].root)
    (job,) = data["jobs"]
    assert job["errors"] == {}, job["errors"]
    assert job["model"]["factor"] == 4 and job["model"]["virtual_tasks"] == 8
    assert job["model"]["inputs"] == [{"input": f"deltalog.{STREAM}", "partitions": 2, "partitions_now": 2}]
    event = job["scaling_events"][0]
    assert (event["kind"], event["from_factor"], event["to_factor"], event["status"]) == ("rescale", 1, 4, "activated")
    assert event["event_id"] == rescaled_job["event"].event_id
    assert job["dq"][0]["window"].startswith("event:") and job["dq"][0]["ok"] is rescaled_job["report"].success
    # the rescale saved model v2 under the scaling lock, then let it go
    assert (job["lock"]["held"], job["lock"]["status"]) == (False, "released")
    assert (job["driver"]["running"], job["driver"]["down"], job["driver"]["drivers"]) == (False, True, [])
    (decision,) = job["autosize_decisions"]
    expected = rescaled_job["decision"]
    assert (decision["action"], decision["target_factor"]) == (expected.action, expected.factor)


def test_an_unauthenticated_browser_is_refused(
    browser: Any, running_airflow: AirflowClient, rescaled_job: dict[str, Any]
) -> None:
    context = _context(browser, running_airflow, logged_in=False)
    try:
        page = context.new_page()
        response = page.goto(PAGE)
        assert response is not None and response.status == 401
        assert JOB not in page.content()
        assert page.get_by_role("link", name="Log in").count() == 1
        api = context.request.get("/elastic-pipelines/api/jobs")
        assert api.status == 401 and JOB not in api.text()
    finally:
        context.close()
    # a forged token is no better than none
    forged = httpx.get(
        f"{running_airflow.base_url}/elastic-pipelines/api/jobs", headers={"Authorization": "Bearer not-a-jwt"}
    )
    assert forged.status_code in (401, 403) and JOB not in forged.text
