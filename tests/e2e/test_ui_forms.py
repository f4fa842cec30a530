"""The verdict links and the rescale form of the "Elastic pipelines" page, in a real headless Chromium.

Against the session's running Airflow (``running_airflow``): a job is created at factor 1 in the home the
api-server reads; one failing verdict is produced as the CLI does (a seeded loss, no DAG run) and one by a
real ``quality_report`` run triggered through the REST API. The browser logs in through Airflow's own login
form, follows a verdict to its Data Docs page and another to its DAG run, previews a rescale to factor 4 and
triggers it; the REST API then shows the ``elastic_rescale`` run with that conf. ``elastic_rescale`` is kept
paused while this module runs, so the run is created (queued) and not executed (``test_rest_rescale`` drives
a real one); the run is deleted afterwards. Airflow's own trigger form for ``elastic_rescale`` is rendered too.

The machine has no internet: requests that leave the Airflow server (GX's Data Docs pull CDN styles) are
aborted by the browser context, so pages load at once and the test does not depend on the network.
Screenshots go to ``test-artifacts/ui-forms/`` (gitignored) for CI to keep.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from pipelines.control import ControlPlane
from pipelines.control.home import Home
from pipelines.core.hashing import max_factor
from pipelines.demo.producer import produce
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.quality.report import validate_window
from pipelines.quality.synthetic import synthetic_window
from pipelines.quality.verify import Window
from pipelines.systems.deltalog import DeltaLog
from tests.e2e.airflow_fixtures import ADMIN_USER, REPO, AirflowClient

JOB = "forms_job"
STREAM = "forms_events"
PAGE = "/elastic-pipelines/"
SEEDED = "run:seeded-loss"
RESCALE = "elastic_rescale"
ARTIFACTS = REPO / "test-artifacts" / "ui-forms"


@pytest.fixture
def chromium(browser: Any) -> Any:
    """The session's browser (``tests/e2e/browser.py``), under this module's name for it."""
    return browser


@pytest.fixture(scope="module")
def verdicts(running_airflow: AirflowClient) -> dict[str, Any]:
    """The job, a CLI verdict with two lost records, and the verdicts of a real ``quality_report`` run."""
    home = Home(running_airflow.pipelines_home)
    log = DeltaLog(home.streams)
    log.create(STREAM, 2)
    produce(log, home, STREAM, 100, 10, seed=3)
    raw = JobConfig.load(REPO / "include" / "jobs" / "enrichment.yaml").to_dict()
    raw.update(
        name=JOB,
        inputs=[{"system": "deltalog", "stream": STREAM}],
        sink={"table": f"{JOB}_out"},
        dead_letter={"table": f"{JOB}_dead"},
    )
    create_job(home, JobConfig.from_dict(raw))

    expected, rows, dead = synthetic_window(200, partitions=2, factor=4, keys=10, batch=50, seed=11)
    lost = rows.iloc[[21, 22]]
    seeded = Window(JOB, SEEDED, expected, rows.drop(index=lost.index), dead, {1: 4})
    report = validate_window(home, seeded, sequence="seq")  # what `pipelines verify` records: no DAG run
    assert not report.success

    running_airflow.wait_for_dag("quality_report")
    run_id = running_airflow.trigger("quality_report")
    state = running_airflow.wait_for_run("quality_report", run_id, timeout=600)
    assert state == "success", f"quality_report run {run_id} ended {state}"
    running_airflow.wait_for_dag(RESCALE)
    running_airflow.json("PATCH", f"/api/v2/dags/{RESCALE}", json={"is_paused": True})  # created, never run
    return {"home": home, "lost": lost, "report_run": run_id}


def _shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"[ui-forms] screenshot {path}")
    return path


def _offline_context(chromium: Any, client: AirflowClient) -> Any:
    context = chromium.new_context(base_url=client.base_url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    context.route(lambda url: not url.startswith(client.base_url), lambda route: route.abort())
    return context


def _log_in(page: Any, client: AirflowClient) -> None:
    """Through Airflow's login form, from the plugin page's own "Log in" link."""
    response = page.goto(PAGE)
    assert response is not None and response.status == 401
    page.get_by_role("link", name="Log in").click()
    page.locator("input[name=username]").fill(ADMIN_USER)
    page.locator("input[name=password]").fill(client.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**{PAGE}")  # back where we started, with the `_token` cookie set


def test_verdicts_link_to_data_docs_and_runs_and_the_rescale_form_triggers_a_run(
    chromium: Any, running_airflow: AirflowClient, verdicts: dict[str, Any]
) -> None:
    context = _offline_context(chromium, running_airflow)
    created: str | None = None
    try:
        page = context.new_page()
        _log_in(page, running_airflow)
        card = page.locator(f"section.job[data-job='{JOB}']")
        card.wait_for()
        started = time.monotonic()
        page.reload()
        card.wait_for()
        print(f"[ui-forms] page reloaded in {time.monotonic() - started:.2f} s")

        # the CLI's failing verdict: its first offenders by offset, no DAG run, a link to its Data Docs page
        seeded = card.locator("table.dq tbody tr", has_text=SEEDED)
        cells = seeded.locator("td")
        assert "FAIL" in cells.nth(2).inner_text()
        assert cells.nth(4).inner_text() == "CLI (no DAG run)"
        offenders = seeded.locator("ul.sample[data-check='no_loss'] li").all_inner_texts()
        lost = verdicts["lost"]
        assert offenders == [
            f"events/{p}@{o}"
            for p, o in sorted(zip(lost["partition"], lost["offset"], strict=True), key=lambda x: (x[0], int(x[1])))
        ]
        _shot(page, "1-page-with-verdicts")
        link = seeded.locator("a.docs[data-check='no_loss']")
        href = link.get_attribute("href")
        assert href is not None and href.startswith("docs/validations/")
        with page.expect_navigation():
            link.click()
        assert unquote(urlparse(page.url).path).startswith("/elastic-pipelines/docs/validations/")
        text = page.locator("body").inner_text()
        # the page of that verdict: this job's input-records suite, the seeded window's run, its two lost records
        assert f"{JOB}.input_records" in text and SEEDED in text, text[:2000]
        assert "2 unexpected values found" in text, text[:2000]
        _shot(page, "2-data-docs-of-the-failed-verdict")

        # the quality_report verdict links to the Airflow run that produced it
        page.goto(PAGE)
        by_dag = card.locator("table.dq tbody tr", has_text="run:v1")
        run_link = by_dag.locator("a.dag-run")
        run_id = verdicts["report_run"]
        assert run_link.inner_text() == f"quality_report · {run_id}"
        with page.expect_navigation():
            run_link.click()
        assert unquote(urlparse(page.url).path) == f"/dags/quality_report/runs/{run_id}"
        page.get_by_text(run_id).first.wait_for()  # Airflow's run page, about that run
        _shot(page, "3-airflow-run-of-the-verdict")

        # the rescale form: current factor, a bounded number field, a preview of the plan
        page.goto(PAGE)
        form = card.locator("form.rescale")
        assert form.locator(".current-factor").inner_text() == "1"
        field = form.locator("input[name=factor]")
        assert field.get_attribute("type") == "number"
        assert (field.get_attribute("min"), field.get_attribute("max")) == ("1", str(max_factor()))
        field.fill("4")
        with page.expect_navigation():
            form.locator("button.preview").click()
        plan = page.locator("table.plan")
        assert plan.locator("tr.factor td.now").inner_text() == "1"
        assert plan.locator("tr.factor td.planned").inner_text() == "4"
        assert plan.locator("tr.virtual-tasks td.now").inner_text() == "2"
        assert plan.locator("tr.virtual-tasks td.planned").inner_text() == "8"  # 2 partitions x factor 4
        assert "elasticity factor 1 → 4" in page.locator("ul.changes").inner_text()
        assert page.get_by_text(f"{RESCALE} is paused").count() == 1
        _shot(page, "4-rescale-preview")
        assert ControlPlane(verdicts["home"]).job_models.latest_version(JOB) == 1  # the preview wrote nothing

        with page.expect_navigation(url=f"**/dags/{RESCALE}/runs/**"):
            page.locator("form.confirm button.trigger").click()
        created = unquote(urlparse(page.url).path).rsplit("/runs/", 1)[1]
        page.get_by_text(created).first.wait_for()
        _shot(page, "5-triggered-run-in-airflow")
    finally:
        context.close()

    run = running_airflow.json("GET", f"/api/v2/dags/{RESCALE}/dagRuns/{created}")
    try:
        assert run["conf"]["job"] == JOB and run["conf"]["factor"] == 4, run["conf"]
        assert run["conf"]["dry_run"] is False and run["run_type"] == "manual"
        assert run["triggering_user_name"] == ADMIN_USER
    finally:
        running_airflow.http.delete(f"/api/v2/dags/{RESCALE}/dagRuns/{created}")


def test_bad_rescale_input_is_refused_with_the_reason(running_airflow: AirflowClient, verdicts: dict[str, Any]) -> None:
    plan = running_airflow.json("GET", "/elastic-pipelines/api/rescale/preview", params={"job": JOB, "factor": 2})
    assert (plan["plan"]["to_factor"], plan["plan"]["virtual_tasks"], plan["dag"]["paused"]) == (2, 4, True)
    post = running_airflow.http.post
    cases = [
        ({"job": JOB, "factor": "0"}, "elasticity factor must be >= 1"),
        ({"job": JOB, "factor": str(max_factor() + 1)}, f"above the maximum {max_factor()}"),
        ({"job": JOB, "factor": "four"}, "whole number >= 1, got 'four'"),
        ({"job": "no_such_job", "factor": "2"}, "no_such_job"),
    ]
    for form, message in cases:
        answer = post("/elastic-pipelines/rescale", data=form, headers={"Accept": "application/json"})
        assert answer.status_code == 400 and message in answer.json()["detail"], (form, answer.text)
        preview = running_airflow.get("/elastic-pipelines/rescale/preview", params=form)
        assert preview.status_code == 400 and "class='refusal'" in preview.text, (form, preview.text[:500])
    other_site = post(
        "/elastic-pipelines/rescale", data={"job": JOB, "factor": "2"}, headers={"Origin": "https://evil.example"}
    )
    assert other_site.status_code == 403
    anonymous = running_airflow.http.build_request("POST", "/elastic-pipelines/rescale", data={"job": JOB})
    anonymous.headers.pop("Authorization")
    assert running_airflow.http.send(anonymous).status_code == 401
    runs = running_airflow.json("GET", f"/api/v2/dags/{RESCALE}/dagRuns", params={"limit": 100})["dag_runs"]
    assert not [r for r in runs if (r.get("conf") or {}).get("job") == JOB]  # no refused request made a run


def test_airflows_trigger_form_renders_the_factor_as_a_bounded_number_field(
    chromium: Any, running_airflow: AirflowClient, verdicts: dict[str, Any]
) -> None:
    for dag in running_airflow.json("GET", "/api/v2/dags", params={"limit": 100})["dags"]:
        params = running_airflow.json("GET", f"/api/v2/dags/{dag['dag_id']}/details").get("params") or {}
        undescribed = [name for name, p in params.items() if not (p.get("description") or "").strip()]
        assert not undescribed, f"{dag['dag_id']}: Params without a description: {undescribed}"

    context = _offline_context(chromium, running_airflow)
    try:
        context.add_cookies([{"name": "_token", "value": running_airflow.token, "url": running_airflow.base_url}])
        page = context.new_page()
        page.goto(f"/dags/{RESCALE}")
        page.get_by_role("button", name="Trigger").first.click()
        field = page.locator("input[name=element_factor]")
        field.wait_for()
        # Airflow 3.3 renders an integer Param as Chakra's NumberInput: a spinbutton with the Param's bounds
        # (an <input type=text inputmode=decimal>, not type=number); a free-text Param would be a <textarea>
        assert field.get_attribute("role") == "spinbutton"
        assert field.get_attribute("aria-roledescription") == "numberfield"
        assert field.get_attribute("aria-valuemin") == "1"
        assert field.get_attribute("aria-valuemax") == str(max_factor())
        assert page.locator("textarea[name=element_factor]").count() == 0
        assert page.get_by_text("ignored when auto is on").count() == 1  # the factor's description
        _shot(page, "6-airflow-trigger-form")
    finally:
        context.close()
