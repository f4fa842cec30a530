"""Data-quality verdicts on the "Elastic pipelines" page: their Data Docs pages, their DAG runs, their offenders.

* ``GET /elastic-pipelines/docs/<page>`` serves the Data Docs site of the home
  (``<home>/quality/docs``, built by ``pipelines.quality.report``) through the
  plugin app, so it is behind Airflow's login like the page itself, and a
  browser on a machine without access to the home's files can read it.
  Only files inside the site are served; anything else is a 404.
* Every check of a verdict links to the page of the validation that judged it
  (``dq_results.docs_page``); a verdict links to the Airflow run that produced
  it (``dq_results.dag_id``/``run_id``, Airflow 3's ``/dags/{dag_id}/runs/{run_id}``),
  or says that the CLI produced it; a failed check lists its first offenders
  (``dq_results.sample``: key, stream, partition, offset, at most 5).

The served pages are Great Expectations' HTML. They pull styles and scripts
from public CDNs (unreachable on many Airflow machines anyway) and run inside
Airflow's origin here, so they are sent with a Content-Security-Policy that
lets no script run and loads images only from this server (GX's pages also
carry a tracking image); styles and fonts may still come from the CDNs when
they are reachable. The pages' content is plain HTML and reads without them.

No ``from __future__ import annotations`` here: FastAPI resolves the route
functions' annotations at definition time, and they name locally imported types.
"""

import html
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

DOCS_ROUTE = "/docs"
SAMPLE_SHOWN = 5
CSP = (
    "default-src 'self'; script-src 'none'; object-src 'none'; connect-src 'none'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline' https:; font-src 'self' data: https:; frame-ancestors 'self'; "
    "base-uri 'none'; form-action 'none'"
)


# --- data: what ``ui._dq`` adds to each check and each verdict --------------------------------------------------------


def check_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A check's Data Docs page and first offenders, from its ``dq_results`` row (older rows lack both)."""
    return {"docs_page": _text(row.get("docs_page")), "sample": parse_sample(row.get("sample"))}


def window_fields(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The DAG run that produced a verdict (all its checks come from one validation), or none (the CLI)."""
    for row in rows:
        dag_id, run_id = _text(row.get("dag_id")), _text(row.get("run_id"))
        if dag_id and run_id:
            return {"dag_id": dag_id, "run_id": run_id, "run_url": run_url(dag_id, run_id)}
    return {"dag_id": None, "run_id": None, "run_url": None}


def parse_sample(raw: Any) -> list[dict[str, Any]]:
    """The recorded offenders, bounded; a value that is not the JSON list we write reads as none."""
    text = _text(raw)
    if not text:
        return []
    try:
        items = json.loads(text)
    except ValueError:
        return []
    if not isinstance(items, list):
        return []
    return [dict(i) for i in items if isinstance(i, Mapping)][:SAMPLE_SHOWN]


def docs_url(page: str) -> str:
    """The page's address relative to the plugin page (``/elastic-pipelines/``)."""
    return DOCS_ROUTE.lstrip("/") + "/" + quote(page, safe="/")


def run_url(dag_id: str, run_id: str) -> str:
    """Airflow 3's page of a DAG run, relative to the plugin page (so it works under a root path too)."""
    return f"../dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text or None


# --- page: the cells of the verdicts table ----------------------------------------------------------------------------


def check_cell(check: Mapping[str, Any]) -> str:
    """The check's pill (a link to its Data Docs page when there is one) and, when it failed, its first offenders."""
    ok = bool(check["success"])
    label = f"{_e(check['check'])} {_e(check['observed'])}/{_e(check['checked'])}"
    title = _e(check.get("examples") or "")
    page = check.get("docs_page")
    if page:
        pill = (
            f"<a class='pill {'ok' if ok else 'bad'} docs' href='{_e(docs_url(page))}' title='{title}' "
            f"data-check='{_e(check['check'])}'>{label}</a>"
        )
    else:
        cls = "ok" if ok else "bad"
        pill = f"<span class='pill {cls}' title='{title}' data-check='{_e(check['check'])}'>{label}</span>"
    sample = check.get("sample") or []
    if ok or not sample:
        return pill
    items = "".join(f"<li>{_e(describe_offender(s))}</li>" for s in sample)
    return f"{pill}<ul class='sample mono' data-check='{_e(check['check'])}'>{items}</ul>"


def origin_cell(window: Mapping[str, Any]) -> str:
    """A link to the DAG run that produced the verdict, or why there is none."""
    if window.get("run_url"):
        return (
            f"<a class='dag-run' href='{_e(window['run_url'])}' target='_top'>"
            f"{_e(window['dag_id'])} · {_e(window['run_id'])}</a>"
        )
    return "<span class='muted dag-run'>CLI (no DAG run)</span>"


def describe_offender(item: Mapping[str, Any]) -> str:
    """``key k at stream/partition@offset`` plus what else the check recorded (``after``, task, bucket)."""
    where = f"{item.get('stream', '?')}/{item.get('partition', '?')}@{item.get('offset', '?')}"
    text = f"key {item['key']} at {where}" if item.get("key") is not None else where
    extra = [f"{k.replace('_', ' ')} {v}" for k, v in item.items() if k not in ("key", "stream", "partition", "offset")]
    return text + (f" ({', '.join(extra)})" if extra else "")


# --- app: the Data Docs site ------------------------------------------------------------------------------------------


def site_root(home: Any = None) -> Path:
    from pipelines.control.home import resolve_home
    from pipelines.quality.report import quality_dir

    return quality_dir(home if home is not None else resolve_home()) / "docs"


def resolve_page(root: Path, page: str) -> Path | None:
    """The file of ``page`` inside the site, or None (outside it, missing, or not a file)."""
    root = root.resolve()
    target = (root / page).resolve() if page else root / "index.html"
    if target.is_dir():
        target = target / "index.html"
    if not target.is_relative_to(root) or not target.is_file():
        return None
    return target


def add_routes(app: Any) -> None:
    """``GET /docs/`` and ``GET /docs/<page>``: the home's Data Docs site (the app's own auth applies)."""
    from fastapi.exceptions import HTTPException
    from fastapi.responses import FileResponse, RedirectResponse

    def serve(page: str) -> FileResponse:
        root = site_root()
        found = resolve_page(root, page)
        if found is None:
            detail = "no such Data Docs page" if root.is_dir() else "no Data Docs yet: no validation has built them"
            raise HTTPException(status_code=404, detail=detail)
        return FileResponse(found, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"})

    @app.get(DOCS_ROUTE, include_in_schema=False)
    def docs_root() -> RedirectResponse:
        return RedirectResponse(DOCS_ROUTE.lstrip("/") + "/")

    @app.get(DOCS_ROUTE + "/{page:path}", include_in_schema=False)
    def docs(page: str) -> FileResponse:
        return serve(page)
