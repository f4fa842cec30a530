"""``run_quality``: validate one window of a job with Great Expectations, record and report the verdict.

The one entry point for the CLI (``python -m pipelines verify``) and the Airflow DAGs:

1. ``verify.load_window`` reads the sink, the dead letters and the control plane (a whole run, or the
   batches around one scaling event);
2. ``checks.annotate`` flags every input record and sink row (no loss, duplicates, per-key order, routing);
3. a file-backed GX context under ``<home>/quality/gx`` validates the flagged frames with the suites of
   ``expectations`` (one validation definition per frame, all in one checkpoint run named after the window);
4. every check's outcome is appended to the ``dq_results`` control table, with the first offenders named
   by key and offset (``examples`` as text, ``sample`` as JSON fields), the Data Docs page that shows it
   (``docs_page``) and, when an Airflow task validated, its DAG run (``dag_id``, ``run_id``); the Data
   Docs site in ``<home>/quality/docs`` gets one page per validation.

The GX project is files (no GX Cloud): in the home itself for a local home; for a home on object storage, in
a working copy on this host (``storage.hostlocal``) pulled from ``<home>/quality`` before a validation and
written back after it, so the Data Docs another host serves include it. Two validations of the same home at
the same moment may race on the GX context's files (the Delta table is safe: appends only); run them one after
another.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pipelines.control.dq_results import DagRunRef
from pipelines.quality.checks import Annotated, Verdict, annotate
from pipelines.quality.verify import Window, load_window
from pipelines.storage.home import Home
from pipelines.storage.hostlocal import host_dir, pull, push

DOCS_SITE = "quality"
_VERDICT_CHECK = {
    "no_loss": "lost",
    "no_duplicates": "duplicated",
    "key_order": "out of order",
    "routing": "misrouted",
}


@dataclass
class QualityReport:
    job: str
    window: str
    verdict: Verdict
    results: list[dict[str, Any]] = field(default_factory=list)  # the dq_results rows of this validation
    docs_index: str | None = None  # the Data Docs index: a local path, or its URI in an object-store home

    @property
    def success(self) -> bool:
        return all(r["success"] for r in self.results) and self.verdict.ok

    def summary(self) -> str:
        lines = [f"job {self.job} window {self.window}: {self.verdict.summary()}"]
        for r in self.results:
            mark = "ok  " if r["success"] else "FAIL"
            lines.append(f"  {mark} {r['check']:<14} {r['observed']:>8} of {r['checked']}")
        if self.docs_index is not None:
            lines.append(f"data docs: {self.docs_index}")
        return "\n".join(lines)


def quality_dir(home: Home) -> Path:
    """Where this host's GX project and Data Docs site are: in a local home, or this host's working copy."""
    return home.root.local_path() / "quality" if home.is_local else host_dir(home.root, "quality")


_SYNCED: dict[str, float] = {}


def sync_docs(home: Home, every_s: float = 0.0) -> Path:
    """This host's copy of an object-store home's Data Docs site, brought up to date (new and changed pages)."""
    local = quality_dir(home) / "docs"
    key = str(home.root)
    if time.monotonic() - _SYNCED.get(key, -1e9) >= every_s:
        pull(home.store, home.root / "quality" / "docs", local, changed_only=True)
        _SYNCED[key] = time.monotonic()
    return local


@contextmanager
def working_copy(home: Home) -> Iterator[Path]:
    """The GX project to validate in; under an object-store home, pulled first and written back after."""
    local = quality_dir(home)
    if home.is_local:
        yield local
        return
    local.mkdir(parents=True, exist_ok=True)
    known = pull(home.store, home.root / "quality", local)
    yield local
    push(local, home.store, home.root / "quality", known)


def run_quality(
    home: Home,
    job: str,
    event: str | None = None,
    *,
    sequence: str | None = None,
    record: bool = True,
    docs: bool = True,
    dag_run: DagRunRef | None = None,
) -> QualityReport:
    """Validate a job's whole run (``event=None``) or the window of one scaling event (id or its prefix).

    ``dag_run``: the Airflow DAG run validating, recorded with the verdicts (None: the CLI or a test).
    """
    window = load_window(home, job, event)
    return validate_window(home, window, sequence=sequence, record=record, docs=docs, dag_run=dag_run)


def validate_window(
    home: Home,
    window: Window,
    *,
    sequence: str | None = None,
    record: bool = True,
    docs: bool = True,
    dag_run: DagRunRef | None = None,
) -> QualityReport:
    annotated = annotate(window.expected, window.rows, window.dead, window.factors.__getitem__, sequence)
    verdict = annotated.verdict().with_unread(window.unread, window.version)
    checked = window.state_checks()
    verdict.states = [v for v, _ in checked]
    states = {v.state: frame for v, frame in checked}
    with working_copy(home) as root:
        results = validate_annotated(root, window.job, window.window_id, annotated, verdict, docs=docs, states=states)
    if window.window_id.startswith("run:"):  # no suite can see them: they are in no frame
        results.append(_unread_result(window, verdict))
    if dag_run is not None:
        results = [{**r, **dag_run.columns()} for r in results]
    report = QualityReport(window.job, window.window_id, verdict, results)
    if docs:
        index = home.root / "quality" / "docs" / "index.html"
        report.docs_index = str(index)
    if record:
        from pipelines.control import ControlPlane

        ControlPlane(home).dq_results.append(results)
    return report


def validate_annotated(
    root: Path,
    job: str,
    window_id: str,
    annotated: Annotated,
    verdict: Verdict,
    *,
    docs: bool = True,
    states: dict[str, pd.DataFrame] | None = None,
) -> list[dict[str, Any]]:
    """Run the GX suites over the flagged frames; one dq_results row per expectation, plus the dead-letter count.

    ``states``: a stateful job's per-key frame of each state (``quality.state_check``), validated as the asset
    ``state_<name>``."""
    import great_expectations as gx

    from pipelines.quality.expectations import CHECKS, INDEX_COLUMNS, STATE_ASSET, build_suites, state_suite

    context = _context(root, docs)
    frames = {
        "input_records": annotated.records,
        "sink_rows": _gx_frame(annotated.rows),
        "dead_letters": _gx_frame(_with_key_text(annotated.dead)),
    }
    suites = build_suites(job)
    for name, frame in (states or {}).items():
        frames[f"{STATE_ASSET}{name}"] = frame
        suites[f"{STATE_ASSET}{name}"] = state_suite(job, name)
    by_state = {v.state: v for v in verdict.states}
    source = context.data_sources.add_or_update_pandas("elastic_pipelines")
    definitions = []
    for asset_name, suite in suites.items():
        suite = context.suites.add_or_update(suite)
        try:
            asset = source.get_asset(asset_name)
        except LookupError:
            asset = source.add_dataframe_asset(asset_name)
        batch = _batch_definition(asset)
        definition = context.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=f"{job}.{asset_name}", data=batch, suite=suite)
        )
        definitions.append((asset_name, definition))
    results: list[dict[str, Any]] = []
    for asset_name, definition in definitions:
        frame = frames[asset_name]
        state_name = asset_name[len(STATE_ASSET) :] if asset_name.startswith(STATE_ASSET) else None
        index = INDEX_COLUMNS[STATE_ASSET if state_name is not None else asset_name]
        columns = [c for c in index if c in frame.columns]
        result_format = {
            "result_format": "SUMMARY",
            "partial_unexpected_count": 5,
            "unexpected_index_column_names": columns,
        }
        checkpoint = context.checkpoints.add_or_update(
            gx.Checkpoint(
                name=f"{job}.{asset_name}",
                validation_definitions=[definition],
                actions=[gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=[DOCS_SITE])] if docs else [],
                result_format=result_format,
            )
        )
        run = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=gx.RunIdentifier(run_name=window_id))
        for identifier, validation in run.run_results.items():
            page = _docs_page(context, identifier, root / "docs") if docs else None
            for r in validation.results:
                check = CHECKS.get(r.expectation_config.type, r.expectation_config.type)
                observed = int(r.result.get("unexpected_count") or 0)
                checked = int(r.result.get("element_count") or len(frame))
                examples = verdict.examples.get(_VERDICT_CHECK.get(check, ""), [])
                sample = verdict.samples.get(_VERDICT_CHECK.get(check, ""), [])
                if state_name is not None:
                    check = f"state:{state_name}"
                    found = by_state.get(state_name)
                    examples = list(found.examples) if found is not None else []
                    sample = list(found.samples) if found is not None else []
                if check == "dead_letters":
                    observed = checked = len(frame)  # counted and reported; null errors fail the expectation
                    examples = [f"{len(frame)} dead letters"] if len(frame) else []
                    if not r.success:
                        examples.insert(0, f"{int(r.result.get('unexpected_count') or 0)} without an error")
                elif not r.success and not examples:
                    examples = [str(x) for x in (r.result.get("partial_unexpected_index_list") or [])[:5]]
                results.append(
                    {
                        "job": job,
                        "window": window_id,
                        "check": check,
                        "success": bool(r.success),
                        "observed": observed,
                        "checked": checked,
                        "examples": "; ".join(examples) if examples else None,
                        "sample": json.dumps(sample) if sample and not r.success else None,
                        "docs_page": page,
                    }
                )
    return results


def _unread_result(window: Window, verdict: Verdict) -> dict[str, Any]:
    """The whole run's check that every input partition with records is read by some task of the active model."""
    return {
        "job": window.job,
        "window": window.window_id,
        "check": "partitions_read",
        "success": not verdict.unread,
        "observed": verdict.unread,
        "checked": verdict.records_expected + verdict.unread,
        "examples": "; ".join(verdict.examples.get("unread", [])) or None,
        "sample": json.dumps(verdict.samples["unread"]) if verdict.unread else None,
        "docs_page": None,
    }


def _context(root: Path, docs: bool) -> Any:
    import great_expectations as gx

    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    context = gx.get_context(mode="file", project_root_dir=str(root / "gx"))
    bars = context.variables.progress_bars
    globally = bars.get("globally") if isinstance(bars, dict) else getattr(bars, "globally", None)
    if globally is not False:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        context.variables.save()
    if docs and DOCS_SITE not in (context.variables.data_docs_sites or {}):
        context.add_data_docs_site(
            site_name=DOCS_SITE,
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(root / "docs")},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    return context


def _docs_page(context: Any, identifier: Any, site: Path) -> str | None:
    """The page of one validation result, relative to the site's root (GX decides the layout; we only ask it)."""
    from urllib.parse import unquote, urlparse

    try:
        urls = context.get_docs_sites_urls(resource_identifier=identifier, site_name=DOCS_SITE)
    except Exception:  # a page we cannot locate is a missing link, never a failed validation
        return None
    site = site.resolve()
    for url in urls:
        path = Path(unquote(urlparse(url.get("site_url") or "").path)).resolve()
        if path.is_relative_to(site):
            return path.relative_to(site).as_posix()
    return None


def _batch_definition(asset: Any) -> Any:
    try:
        return asset.get_batch_definition("whole_window")
    except (KeyError, LookupError, ValueError):
        return asset.add_batch_definition_whole_dataframe("whole_window")


def _with_key_text(frame: pd.DataFrame) -> pd.DataFrame:
    from pipelines.quality.checks import _texts

    if "key" not in frame.columns:
        return frame
    out = frame.drop(columns=["key"])
    out.insert(0, "key_text", _texts(frame["key"]))
    return out


def _gx_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Binary columns (record values) add nothing to the checks and do not render in Data Docs."""
    keep = [c for c in frame.columns if not (len(frame) and isinstance(frame[c].iloc[0], bytes | bytearray))]
    return frame[keep]
