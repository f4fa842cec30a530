"""The page's links and rescale form, inside Airflow as an operator reaches them, and Airflow's own trigger form.

Against the session's running Airflow (``running_airflow``): a job is created at factor 1 in the home the
api-server reads; one failing verdict is produced as the CLI does (a seeded loss, no DAG run) and one by a
real ``quality_report`` run triggered through the REST API.

* The page standalone: a verdict's Data Docs page and the Data Docs index, served offline (no console
  message at all), and a verdict's link to the Airflow run that produced it.
* The page inside Airflow: logged in through Airflow's login form, the operator opens Browse → Elastic
  pipelines; in Airflow's sandboxed iframe the rescale form previews factor 2 (a split, a catch-up run),
  triggers ``elastic_rescale`` and shows the run's confirmation in the frame; the REST API sees the run
  succeed, the frame follows it to "success", and the run's link opens the run in the Airflow window.
* Factors that are not factors (0, -1, 1025, 2.5, "abc", empty), through the REST API and through Airflow's
  trigger form: the form keeps what was typed, each run fails its ``validate`` task with the reason as the
  run's note, shown on the run's page; the job's model never changes.

The machine has no internet: requests that leave the Airflow server are aborted by the browser context.
Screenshots go to ``test-artifacts/ui-forms/`` (gitignored) for CI to keep.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pytest

from pipelines.control import ControlPlane
from pipelines.core.hashing import max_factor
from pipelines.demo.producer import produce
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.quality.report import validate_window
from pipelines.quality.synthetic import synthetic_window
from pipelines.quality.verify import Window
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.e2e.airflow_fixtures import ADMIN_USER, REPO, AirflowClient

JOB = "forms_job"
STREAM = "forms_events"
PAGE = "/elastic-pipelines/"
SEEDED = "run:seeded-loss"
RESCALE = "elastic_rescale"
FRAME = "iframe[title='Elastic pipelines']"
ARTIFACTS = REPO / "test-artifacts" / "ui-forms"
# Each refusal is a DAG run of its own (7-8 s of the e2e worker: the DAG's runs go one at a time), so each way in
# is tried with the values that way could alter: through the REST API, a JSON number a typed parameter would round
# (a whole number, too small or too big, arrives as sent: no way in alters it), and what a form could clamp, keep
# from being typed, or empty. The check's messages, every refusal of validate, are tested in-process:
# tests/unit/core/test_hashing.py and the DAG's validate in tests/e2e/test_dags.py.
BAD_FACTORS: list[tuple[Any, str]] = [  # (what the operator gives, what the run's note must say)
    (2.5, "elasticity factor must be a whole number >= 1, got 2.5"),
]
TYPED_REFUSALS = {  # factors typed into Airflow's form: text kept as typed
    "0": "elasticity factor must be >= 1, got 0",
    "abc": "got 'abc'",
    "": "no factor given",
}


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
    try:
        state = running_airflow.wait_for_run("quality_report", run_id, timeout=600)
    finally:
        running_airflow.pause("quality_report")  # scheduled hourly and after scaling steps: not while the suite runs
    assert state == "success", f"quality_report run {run_id} ended {state}"
    for other in running_airflow.runs("quality_report"):  # the hour may have started one while ours ran
        if other["dag_run_id"] != run_id:
            running_airflow.wait_for_run("quality_report", other["dag_run_id"], timeout=600)
    running_airflow.wait_for_dag(RESCALE)
    running_airflow.pause(RESCALE, False)
    return {"home": home, "lost": lost, "report_run": run_id}


def _shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"[ui-forms] screenshot {path}")
    return path


def _ended(client: AirflowClient, tag: str, count: int, timeout: float = 600) -> list[dict[str, Any]]:
    """Once ``count`` runs whose reason starts with ``tag`` have ended: their runs.

    The test submits Airflow's form only while no run of its own is writing through the API server. On SQLite
    a write request in flight could hold the lock the form's audit-log write waits for on the server's event
    loop, which then cannot finish that request: the server stalled for the whole busy wait and the trigger
    got a 500 (``pipelines_airflow.sqlite``). An Airflow with a server database (PostgreSQL) has no such wait.
    """
    deadline = time.monotonic() + timeout
    while True:
        runs = client.runs(RESCALE)
        mine = [r for r in runs if str((r.get("conf") or {}).get("reason", "")).startswith(tag)]
        if len(mine) == count and all(r["state"] in ("success", "failed") for r in mine):
            return mine
        assert time.monotonic() < deadline, [(r["conf"], r["state"]) for r in mine]
        time.sleep(1)


def _offline_context(browser: Any, client: AirflowClient) -> Any:
    context = browser.new_context(base_url=client.base_url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    context.route(lambda url: not url.startswith(client.base_url), lambda route: route.abort())
    return context


def _log_in(page: Any, client: AirflowClient, start: str = PAGE) -> None:
    """Through Airflow's own login form, then back at ``start`` with the `_token` cookie set."""
    page.goto(f"/auth/login?next={quote(client.base_url + start)}")
    page.locator("input[name=username]").fill(ADMIN_USER)
    page.locator("input[name=password]").fill(client.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**{start}")


def test_verdicts_link_to_offline_data_docs_and_to_their_runs(
    browser: Any, running_airflow: AirflowClient, verdicts: dict[str, Any]
) -> None:
    context = _offline_context(browser, running_airflow)
    try:
        page = context.new_page()
        messages: list[str] = []
        page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
        response = page.goto(PAGE)
        assert response is not None and response.status == 401  # not logged in yet: a page with a way in
        assert page.get_by_role("link", name="Log in").count() == 1
        _log_in(page, running_airflow)
        card = page.locator(f"section.job[data-job='{JOB}']")
        card.wait_for()

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
        messages.clear()
        link = seeded.locator("a.docs[data-check='no_loss']")
        assert (link.get_attribute("href") or "").startswith("docs/validations/")
        with page.expect_navigation():
            link.click()
        assert unquote(urlparse(page.url).path).startswith("/elastic-pipelines/docs/validations/")
        text = page.locator("body").inner_text()
        # the page of that verdict: this job's input-records suite, the seeded window's run, its two lost records
        assert f"{JOB}.input_records" in text and SEEDED in text, text[:2000]
        assert "2 unexpected values found" in text, text[:2000]
        assert page.locator("link[href*='docs-static/styles/data_docs_default_styles.css']").count() == 1
        assert page.evaluate("() => document.querySelector('img').naturalWidth") > 0  # GX's logo, from the package
        _shot(page, "2-data-docs-of-the-failed-verdict")
        with page.expect_navigation():
            page.get_by_role("link", name="Data Docs index").click()
        rows = page.locator("table.validations tbody tr")
        assert rows.count() >= 6  # 3 suites of the seeded window, 3 of quality_report's, written in the same site
        failed = page.locator("table.validations tbody tr", has_text=SEEDED).filter(has_text=f"{JOB}.input_records")
        assert "FAIL" in failed.inner_text() and "no_loss" in failed.inner_text()
        _shot(page, "3-data-docs-index")
        assert messages == [], messages  # no script, nothing from elsewhere: not one console message

        # the quality_report verdict links to the Airflow run that produced it
        page.goto(PAGE)
        run_link = card.locator("table.dq tbody tr", has_text="run:v1").locator("a.dag-run")
        # the newest run's verdict: ours, or an hourly run the clock started while ours ran (then it is newer)
        validated = ControlPlane(verdicts["home"]).dq_results.read(JOB)
        run_id = validated[validated["window"] == "run:v1"]["run_id"].iloc[-1]
        assert run_id == verdicts["report_run"] or run_id.startswith("scheduled__"), run_id
        assert run_link.inner_text() == f"quality_report · {run_id}"
        with page.expect_navigation():
            run_link.click()
        assert unquote(urlparse(page.url).path) == f"/dags/quality_report/runs/{run_id}"
        page.get_by_text(run_id).first.wait_for()  # Airflow's run page, about that run
    finally:
        context.close()


def test_from_the_browse_menu_the_embedded_page_triggers_a_rescale_that_succeeds(
    browser: Any, running_airflow: AirflowClient, verdicts: dict[str, Any]
) -> None:
    context = _offline_context(browser, running_airflow)
    messages: list[str] = []
    try:
        page = context.new_page()
        page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
        _log_in(page, running_airflow, start="/")
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Elastic pipelines").click()
        page.wait_for_url("**/plugin/elastic-pipelines**")
        frame = page.frame_locator(FRAME)
        card = frame.locator(f"section.job[data-job='{JOB}']")
        card.wait_for(timeout=120_000)
        form = card.locator("form.rescale")
        assert form.locator(".current-factor").inner_text() == "1"
        form.locator("input[name=factor]").fill("2")
        form.locator("button.preview").click()
        changes = frame.locator("ul.changes")
        changes.wait_for()
        assert (changes.get_attribute("data-kind"), changes.get_attribute("data-switch")) == ("split", "catch-up")
        assert frame.locator("table.plan tr.virtual-tasks td.planned").inner_text() == "4"  # 2 partitions x 2
        assert "/plugin/elastic-pipelines/elastic-pipelines/rescale/preview" in page.url  # Airflow follows the frame
        _shot(page, "4-preview-inside-airflow")

        frame.locator("form.confirm button.trigger").click()  # a post in the frame: the sandbox allows forms
        created = frame.locator("p.created a.created-run")
        created.wait_for()
        run_id = frame.locator("section.triggered").get_attribute("data-run") or ""
        assert run_id and run_id in created.inner_text()
        _shot(page, "5-run-created-inside-airflow")

        run = running_airflow.json("GET", f"/api/v2/dags/{RESCALE}/dagRuns/{run_id}")
        assert run["conf"] == {"job": JOB, "factor": 2, "reason": run["conf"]["reason"], "dry_run": False}
        assert run["run_type"] == "manual" and run["triggering_user_name"] == ADMIN_USER
        assert running_airflow.wait_for_run(RESCALE, run_id, timeout=900) == "success"
        model = ControlPlane(verdicts["home"]).job_models.active(JOB)
        assert (model.elasticity_factor, model.task_count) == (2, 4)

        done = frame.locator("section.triggered[data-state='success']")
        done.wait_for(timeout=30_000)  # the confirmation follows the run every 5 s
        _shot(page, "6-run-succeeded-inside-airflow")
        with page.expect_navigation(url=f"**/dags/{RESCALE}/runs/**"):
            done.locator("a.dag-run").first.click()  # followed by Airflow's window itself (embed.js)
        assert unquote(urlparse(page.url).path) == f"/dags/{RESCALE}/runs/{run_id}"
        page.get_by_text(run_id).first.wait_for()
    finally:
        context.close()
    blocked = [m for m in messages if "Unsafe attempt to initiate navigation" in m or "Blocked opening" in m]
    assert not blocked, blocked


def test_a_bad_factor_from_the_rest_api_or_airflows_form_is_refused_with_the_reason_as_the_note(
    browser: Any, running_airflow: AirflowClient, verdicts: dict[str, Any]
) -> None:
    tag = f"bad factor {time.time_ns()}"
    for factor, _ in BAD_FACTORS:
        running_airflow.trigger(RESCALE, {"job": JOB, "factor": factor, "reason": f"{tag} rest {factor!r}"})
    _ended(running_airflow, f"{tag} rest", len(BAD_FACTORS))  # the form submits with no run of ours writing
    context = _offline_context(browser, running_airflow)
    try:
        context.add_cookies([{"name": "_token", "value": running_airflow.token, "url": running_airflow.base_url}])
        page = context.new_page()
        for typed in TYPED_REFUSALS:
            page.goto(f"/dags/{RESCALE}")  # afresh: the form opened from a run's page starts from that run
            page.get_by_role("button", name="Trigger").first.click()
            field = page.locator("input[name=element_factor]")
            field.wait_for()
            assert field.get_attribute("role") != "spinbutton"  # a text field: nothing is clamped or emptied
            field.fill(typed)
            page.locator("input[name=element_job]").fill(JOB)
            page.locator("input[name=element_reason]").fill(f"{tag} form {typed!r}")
            page.locator("input[name=element_reason]").focus()  # the factor field's blur: it keeps the text
            assert field.input_value() == typed
            if typed == "0":
                _shot(page, "7-airflow-trigger-form-keeps-0")
            with page.expect_navigation(url=f"**/dags/{RESCALE}/runs/**"):  # Airflow opens the new run
                page.get_by_role("dialog").get_by_role("button", name="Trigger").click()
            # Airflow's run page re-renders as the run moves (a core of Chromium's while it is open): the wait for
            # the run to end reads the REST API, so the page is left
            page.goto("about:blank")
            _ended(running_airflow, f"{tag} form", list(TYPED_REFUSALS).index(typed) + 1)
    finally:
        context.close()

    mine = _ended(running_airflow, tag, len(BAD_FACTORS) + len(TYPED_REFUSALS))
    expected = {f"{tag} rest {f!r}": why for f, why in BAD_FACTORS}
    expected |= {f"{tag} form {t!r}": why for t, why in TYPED_REFUSALS.items()}
    for run in mine:
        why = expected[run["conf"]["reason"]]
        assert run["state"] == "failed", run
        tasks = {ti["task_id"]: ti["state"] for ti in running_airflow.task_instances(RESCALE, run["dag_run_id"])}
        assert tasks["validate"] == "failed" and tasks["plan"] == "upstream_failed", tasks
        assert (run["note"] or "").startswith("Refused by validate: ") and why in run["note"], run
    assert ControlPlane(verdicts["home"]).job_models.active(JOB).elasticity_factor in (1, 2)  # never another factor
    factors = {run["conf"]["reason"]: run["conf"]["factor"] for run in mine}
    assert factors[f"{tag} form '0'"] == "0" and factors[f"{tag} form ''"] is None  # the form sent what was typed

    context = _offline_context(browser, running_airflow)  # the note where an operator looks: the run's page
    try:
        context.add_cookies([{"name": "_token", "value": running_airflow.token, "url": running_airflow.base_url}])
        page = context.new_page()
        typed_abc = next(r for r in mine if r["conf"]["reason"] == f"{tag} form 'abc'")
        page.goto(f"/dags/{RESCALE}/runs/{quote(typed_abc['dag_run_id'], safe='')}")
        page.get_by_text("Refused by validate: elasticity factor must be a whole number").first.wait_for()
        _shot(page, "8-refused-run-with-its-note")
    finally:
        context.close()


def test_bad_rescale_input_on_the_page_is_refused_with_the_reason(
    running_airflow: AirflowClient, verdicts: dict[str, Any]
) -> None:
    plan = running_airflow.json("GET", "/elastic-pipelines/api/rescale/preview", params={"job": JOB, "factor": 8})
    assert (plan["plan"]["to_factor"], plan["change"]["kind"], plan["dag"]["paused"]) == (8, "split", False)
    post = running_airflow.http.post
    cases = [
        ({"job": JOB, "factor": "0"}, "elasticity factor must be >= 1"),
        ({"job": JOB, "factor": str(max_factor() + 1)}, f"above the maximum {max_factor()}"),
        ({"job": JOB, "factor": "four"}, "whole number >= 1, got 'four'"),
        ({"job": "no_such_job", "factor": "2"}, "no_such_job"),
    ]
    before = len(running_airflow.runs(RESCALE))
    for form, message in cases:
        answer = post("/elastic-pipelines/rescale", data=form, headers={"Accept": "application/json"})
        assert answer.status_code == 400 and message in answer.json()["detail"], (form, answer.text)
        preview = running_airflow.get("/elastic-pipelines/rescale/preview", params=form)
        assert preview.status_code == 400 and 'class="refusal"' in preview.text, (form, preview.text[:500])
    other_site = post(
        "/elastic-pipelines/rescale", data={"job": JOB, "factor": "2"}, headers={"Origin": "https://evil.example"}
    )
    assert other_site.status_code == 403
    torn = post("/elastic-pipelines/rescale", data={"job": JOB, "factor": "2"}, headers={"Origin": "http://[::1"})
    assert torn.status_code == 403, torn.text  # urlparse's ValueError was a 500
    as_json = {"Accept": "application/json"}
    not_taken = [  # each was a 201 (a real rescale) or a 400 that blamed the job, or echoed a file's internals
        ({"data": {"job": JOB, "factor": "2", "dry_run": "true"}}, 400, "unknown field 'dry_run'"),
        ({"data": {"job": [JOB, "other"], "factor": "2"}}, 400, "field job given more than once"),
        ({"json": {"job": JOB, "factor": "2"}}, 415, "post the rescale as a form, not application/json"),
        ({"data": {"factor": "2"}, "files": {"job": ("a.txt", JOB.encode())}}, 422, "text, not files"),
    ]
    for request, status, message in not_taken:
        answer = post("/elastic-pipelines/rescale", headers=as_json, **request)
        assert answer.status_code == status and message in answer.json()["detail"], (request, answer.text)
        assert "_max_mem_size" not in answer.text
    # a reason no history can show on one line: refused as a bad factor is, never echoed (it went into the run's conf)
    huge, long = "x" * 200_000, "x" * 20_000  # a query is shorter than a form can be: 20,000 characters there
    as_page = {"Accept": "text/html"}
    bad_reasons = [
        ("POST", "/elastic-pipelines/rescale", huge, as_json, "reason has 200,000 characters: at most 500"),
        ("POST", "/elastic-pipelines/rescale", huge, as_page, "reason has 200,000 characters: at most 500"),
        ("POST", "/elastic-pipelines/rescale", "a\x00b", as_json, "reason holds a NUL (U+0000) at character 2"),
        ("GET", "/elastic-pipelines/api/rescale/preview", "a\nb", as_json, "reason holds a newline (U+000A)"),
        ("GET", "/elastic-pipelines/rescale/preview", long, as_page, "reason has 20,000 characters: at most 500"),
    ]
    for method, path, reason, accept, message in bad_reasons:
        fields = {"job": JOB, "factor": "2", "reason": reason}
        sent = {"data": fields} if method == "POST" else {"params": fields}
        answer = running_airflow.http.request(method, path, headers=accept, **sent)
        said = (path, accept["Accept"], answer.status_code, answer.text[:300])
        assert answer.status_code == 400 and message in answer.text, said
        assert len(answer.text) < 20_000 and "x" * 600 not in answer.text, said
        if accept is as_json:
            assert answer.json()["detail"].startswith(message), said
    unknown = running_airflow.get("/elastic-pipelines/api/jobs", params={"job": "nope"})
    assert unknown.status_code == 404 and "job 'nope' has no job model" in unknown.json()["detail"], unknown.text
    for path in ("/elastic-pipelines/docs/a%00b.html", "/elastic-pipelines/docs/" + "x" * 5000):
        assert running_airflow.get(path).status_code == 404, path  # a NUL or a name past NAME_MAX was a 500
    anonymous = running_airflow.http.build_request("POST", "/elastic-pipelines/rescale", data={"job": JOB})
    anonymous.headers.pop("Authorization")
    assert running_airflow.http.send(anonymous).status_code == 401
    assert len(running_airflow.runs(RESCALE)) == before  # no refused request made a run
