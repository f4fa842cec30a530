"""A verdict knows its Data Docs page, the DAG run that produced it and its first offenders; the page links them.

No Spark and no Airflow: a synthetic window with two lost records is validated by the real GX layer into a
real home (Delta ``dq_results``, Data Docs on disk), once as a DAG task would (with its run) and once as the
CLI does (without); then the plugin's data and HTML are built from that home.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pipelines_airflow import collect, datadocs
from pipelines_airflow.app import render_page
from pipelines_airflow.page import docs_chrome

from pipelines.control import ControlPlane
from pipelines.control.dq_results import DagRunRef
from pipelines.quality.report import quality_dir, validate_window
from pipelines.quality.synthetic import synthetic_window
from pipelines.quality.verify import Window
from pipelines.storage.home import Home

JOB = "linked"
RUN = DagRunRef("quality_report", "manual__2026-01-01T00:00:00+00:00")
WINDOWS = ("run:seeded-loss", "run:v1")


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = Home(tmp_path_factory.mktemp("links") / "home")
    expected, rows, dead = synthetic_window(200, partitions=2, factor=4, keys=10, batch=50, seed=5)
    lost = rows.iloc[[17, 18]]
    failing = Window(JOB, "run:seeded-loss", expected, rows.drop(index=lost.index), dead, {1: 4})
    cli = validate_window(home, failing, sequence="seq")  # as `pipelines verify` does: no DAG run
    clean = Window(JOB, "run:v1", expected, rows, dead, {1: 4})
    dag = validate_window(home, clean, sequence="seq", dag_run=RUN)  # as the quality_report DAG does
    return {"home": home, "lost": lost, "cli": cli, "dag": dag}


def test_every_check_is_recorded_with_its_page_its_run_and_a_bounded_sample(validated: dict[str, Any]) -> None:
    home = validated["home"]
    rows = ControlPlane(home).dq_results.read(JOB)
    site = quality_dir(home) / "docs"
    assert len(rows) == 12  # 5 GX checks and the partitions-read check per window
    for row in rows.to_dict("records"):
        if row["check"] == "partitions_read":  # judged from the input's partitions, in no GX frame: no page
            assert row["docs_page"] is None and row["success"]
            continue
        page = site / row["docs_page"]
        assert page.is_file(), row["docs_page"]
        assert row["window"] in page.read_text()  # the page of this validation's run
        if row["window"] == "run:v1":
            assert (row["dag_id"], row["run_id"]) == (RUN.dag_id, RUN.run_id)
        else:
            assert row["dag_id"] is None and row["run_id"] is None
    no_loss = rows[(rows["window"] == "run:seeded-loss") & (rows["check"] == "no_loss")].iloc[0]
    assert not no_loss["success"] and no_loss["observed"] == 2
    sample = json.loads(no_loss["sample"])
    lost = validated["lost"]
    assert sample == [
        {"stream": "events", "partition": int(p), "offset": str(o)}
        for p, o in sorted(zip(lost["partition"], lost["offset"], strict=True), key=lambda po: (po[0], int(po[1])))
    ]
    assert "input_records" in no_loss["docs_page"]  # the no-loss check judges the input records
    page = (site / no_loss["docs_page"]).read_text()  # GX's page names the suite, the run and the count
    assert f"{JOB}.input_records" in page and "run:seeded-loss" in page and "2 unexpected values found" in page
    passed = rows[rows["success"]]
    assert passed["sample"].isna().all()


def test_the_page_links_checks_to_data_docs_and_verdicts_to_their_run(validated: dict[str, Any]) -> None:
    home = validated["home"]
    job = collect.job_status(ControlPlane(home), home, JOB)  # no model in this home: only the verdicts matter here
    windows = {w["window"]: w for w in job["dq"]}
    dag, cli = windows["run:v1"], windows["run:seeded-loss"]
    assert dag["run_url"] == "../dags/quality_report/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00"
    assert cli["run_url"] is None and not cli["ok"]
    no_loss = next(c for c in cli["checks"] if c["check"] == "no_loss")
    assert len(no_loss["sample"]) == 2 and no_loss["docs_page"].startswith("validations/")
    html = render_page({"home": str(home.root), "generated_at": "2026-01-01T00:00:00", "jobs": [job]})
    assert f'href="{datadocs.docs_url(no_loss["docs_page"])}"' in html
    assert "CLI (no DAG run)" in html and 'href="../dags/quality_report/runs/' in html
    assert 'target="_top" data-airflow="run"' in html  # followed by Airflow's window when framed (embed.js)
    for p, o in zip(validated["lost"]["partition"], validated["lost"]["offset"], strict=True):
        assert f"events/{p}@{o}" in html


def test_only_files_inside_the_site_are_served(validated: dict[str, Any], tmp_path: Path) -> None:
    site = quality_dir(validated["home"]) / "docs"
    assert datadocs.resolve_page(site, "") == (site / "index.html").resolve()
    page = ControlPlane(validated["home"]).dq_results.read(JOB)["docs_page"].iloc[0]
    assert datadocs.resolve_page(site, page) == (site / page).resolve()
    (tmp_path / "secret.txt").write_text("not a Data Docs page")
    for outside in ("../gx/great_expectations.yml", "../../control", "/etc/passwd", "static/../../gx", "nope.html"):
        assert datadocs.resolve_page(site, outside) is None, outside
    for unnamable in ("a\x00b.html", "x" * 5000, "x/" * 3000):  # ValueError and ENAMETOOLONG were 500s
        assert datadocs.resolve_page(site, unnamable) is None


def test_rows_written_before_the_new_columns_read_as_no_link() -> None:
    old = {"check": "no_loss", "success": False, "observed": 1, "checked": 9, "examples": "events/0@3"}
    assert datadocs.check_fields(old) == {"docs_page": None, "sample": []}
    assert datadocs.window_fields([old]) == {"dag_id": None, "run_id": None, "run_url": None}
    assert datadocs.parse_sample("not json") == [] and datadocs.parse_sample(json.dumps({"a": 1})) == []


def test_data_docs_pages_are_rewritten_to_need_nothing_from_elsewhere(validated: dict[str, Any]) -> None:
    site = quality_dir(validated["home"]) / "docs"
    known = datadocs.static_files(datadocs.gx_static())
    assert "styles/data_docs_default_styles.css" in known and "images/logo-long.png" in known
    pages = sorted(site.glob("validations/**/*.html"))
    assert len(pages) == 6  # 3 suites x 2 windows
    for path in pages:
        page = path.relative_to(site).as_posix()
        original = path.read_text()
        assert "<script" in original and "cdn.jsdelivr.net" in original  # what GX writes
        html = datadocs.rewrite_page(original, page, known, docs_chrome)
        up = "../" * (page.count("/") + 1)
        assert "<script" not in html and "cdn" not in html and "great-expectations-web-assets" not in html
        assert not re.search(r"\son[a-z]+=", html) and "javascript:" not in html  # no inline handler left
        assert f'href="{up}docs-static/styles/data_docs_default_styles.css"' in html
        assert f'src="{up}docs-static/images/logo-long.png"' in html  # the logo, from the installed package
        assert f'<a href="{up}docs/">Data Docs index</a>' in html
        remote = re.findall(r'(?:src|href)="((?:https?:)?//[^"]+)"', html)
        assert "greatexpectations.io" in original and remote == [], remote  # GX's newsletter link is inert text
        assert f'rel="shortcut icon" href="{up}docs-static/images/favicon.ico"' in html  # GX's own path 404s
        assert "Expectation Validation Result" in html and html.count("<table") == original.count("<table")


def test_a_validation_page_names_its_job_asset_and_window_and_counts_each_check(validated: dict[str, Any]) -> None:
    home = validated["home"]
    rows = ControlPlane(home).dq_results.read(JOB).to_dict("records")
    known = datadocs.static_files(datadocs.gx_static())
    [row] = [r for r in rows if r["window"] == "run:seeded-loss" and r["check"] == "no_loss"]
    page = row["docs_page"]
    summary = datadocs.page_summary(rows, page)
    assert summary is not None
    assert (summary["job"], summary["asset"], summary["window"]) == (JOB, "input_records", "run:seeded-loss")
    [no_loss] = [c for c in summary["checks"] if c["check"] == "no_loss"]
    assert (no_loss["success"], no_loss["unexpected"], no_loss["checked"]) == (False, 2, row["checked"])
    original = (quality_dir(home) / "docs" / page).read_text()
    html = datadocs.rewrite_page(original, page, known, lambda up, static: docs_chrome(up, static, summary))
    named = f'<b>Data asset:</b> input_records of job <b>{JOB}</b> · window <span class="mono">run:seeded-loss</span>'
    assert named in html
    assert re.search(r'<tr data-check="no_loss">.*?<td>FAIL</td><td class="unexpected">2</td>', html, flags=re.S)
    assert datadocs.page_summary(rows, "validations/elsewhere.html") is None


def test_the_index_lists_every_validation_with_its_verdict(validated: dict[str, Any]) -> None:
    home = validated["home"]
    rows = ControlPlane(home).dq_results.read(JOB).to_dict("records")
    index = datadocs.site_index(quality_dir(home) / "docs", datadocs.verdicts_by_page(rows))
    found = {(v["suite"], v["run"]): v for v in index["validations"]}
    assert set(found) == {(f"{JOB}.{a}", w) for a in ("input_records", "sink_rows", "dead_letters") for w in WINDOWS}
    assert found[(f"{JOB}.input_records", "run:seeded-loss")]["ok"] is False
    assert ("no_loss", False) in found[(f"{JOB}.input_records", "run:seeded-loss")]["checks"]
    assert found[(f"{JOB}.input_records", "run:v1")]["ok"] is True
    suites = {f"{JOB}.{a}" for a in ("input_records", "sink_rows", "dead_letters")}
    assert {s["suite"] for s in index["suites"]} == suites


def test_a_tasks_log_names_the_data_docs_by_their_address_in_airflows_ui() -> None:
    """A disk path in a task's log means nothing in a browser; the page's URL behind Airflow's login does."""
    assert datadocs.docs_address("http://127.0.0.1:8080/") == "http://127.0.0.1:8080/elastic-pipelines/docs/index.html"
    page = "validations/s/run 1.html"
    assert datadocs.docs_address("https://af.example/ui", page) == "https://af.example/ui/elastic-pipelines/docs/" + (
        "validations/s/run%201.html"
    )
    assert datadocs.docs_address(None) is None and datadocs.docs_address("") is None
