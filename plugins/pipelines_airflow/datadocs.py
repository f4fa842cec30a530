"""Data-quality verdicts on the page, and the home's Data Docs served whole, offline, without scripts.

Links (what ``collect.dq`` adds to each verdict):

* every check links to the Data Docs page of the validation that judged it
  (``dq_results.docs_page``); a verdict links to the Airflow run that produced
  it (``dq_results.dag_id``/``run_id``) or says the CLI produced it; a failed
  check lists its first offenders (``dq_results.sample``).

The site (``<home>/quality/docs``, built by ``pipelines.quality.report``) is
served by the plugin's app under ``/elastic-pipelines/docs/``, behind
Airflow's login, with a Content-Security-Policy that runs no script and loads
nothing from elsewhere. Great Expectations' pages pull Bootstrap, jQuery,
Font Awesome and Vega from public CDNs and fill their index with JavaScript;
on an Airflow machine without internet that left the index empty, the pages
unstyled and ~45 console errors on each. So every page is rewritten as it is
served (``rewrite_page``):

* scripts, inline event handlers and stylesheets from other sites are dropped, and images from
  other sites point at the same files in the installed ``great_expectations``
  package (``/elastic-pipelines/docs-static/``, its ``render/view/static``:
  GX's own styles, fonts and images), or are dropped when it has none;
* GX's own stylesheet and a small layout sheet stand in for Bootstrap's, and
  a bar leads back to the page and to the index;
* the index (``/docs/``) is ours: every validation page of the site with its
  verdict from ``dq_results``, as plain HTML (``site_index``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

PLUGIN_ROOT = "/elastic-pipelines"
"""Where the plugin's app is mounted on the api-server (``plugin.py``); the Data Docs are under its ``docs/``."""
DOCS_ROUTE = "/docs"
STATIC_ROUTE = "/docs-static"
SAMPLE_SHOWN = 5
CSP = (
    "default-src 'self'; script-src 'none'; object-src 'none'; connect-src 'none'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; font-src 'self' data:; frame-ancestors 'self'; base-uri 'none'; "
    "form-action 'none'"
)


# --- data: what ``collect.dq`` adds to each check and each verdict ----------------------------------------------------


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


def docs_address(base_url: str | None, page: str = "index.html") -> str | None:
    """The page's URL in Airflow's UI (behind its login), for a task's log: a disk path there means nothing to
    someone reading it in a browser. None without the UI's base URL (``[api] base_url``)."""
    if not base_url:
        return None
    return f"{base_url.rstrip('/')}{PLUGIN_ROOT}/{docs_url(page)}"


def run_url(dag_id: str, run_id: str, depth: int = 1) -> str:
    """Airflow 3's page of a DAG run, relative to a plugin page ``depth`` folders below the UI's root."""
    return "../" * depth + f"dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def describe_offender(item: Mapping[str, Any]) -> str:
    """``key k at stream/partition@offset`` plus what else the check recorded (``after``, task, bucket)."""
    where = f"{item.get('stream', '?')}/{item.get('partition', '?')}@{item.get('offset', '?')}"
    text = f"key {item['key']} at {where}" if item.get("key") is not None else where
    extra = [f"{k.replace('_', ' ')} {v}" for k, v in item.items() if k not in ("key", "stream", "partition", "offset")]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text or None


# --- the site ---------------------------------------------------------------------------------------------------------


def site_root(home: Any = None) -> Path:
    """The Data Docs site on this host's disk: the home's own, or, for an object-store home, this host's copy of
    it, brought up to date with what validations on any host wrote (at most every ``SYNC_S``)."""
    from pipelines.quality.report import quality_dir, sync_docs
    from pipelines.storage.home import resolve_home

    home = home if home is not None else resolve_home()
    if not home.is_local:
        sync_docs(home, every_s=SYNC_S)
    return quality_dir(home) / "docs"


SYNC_S = 10.0


def gx_static() -> Path:
    """The installed ``great_expectations`` package's static folder (found without importing the package)."""
    spec = importlib.util.find_spec("great_expectations")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the great_expectations package is not installed")
    return Path(spec.origin).parent / "render" / "view" / "static"


def resolve_page(root: Path, page: str) -> Path | None:
    """The file of ``page`` inside ``root``, or None (outside it, missing, not a file, or no name a file system
    takes: a NUL byte, a name past ``NAME_MAX``, which ``resolve`` and ``stat`` raise on)."""
    try:
        root = root.resolve()
        target = (root / page).resolve() if page else root / "index.html"
        if target.is_dir():
            target = target / "index.html"
        if not target.is_relative_to(root) or not target.is_file():
            return None
    except (OSError, ValueError):
        return None
    return target


def site_index(root: Path, verdicts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every validation page of the site, newest run first, with its verdict when ``dq_results`` names the page.

    GX lays validations out as ``validations/<suite as folders>/<run name>/<run time>/<batch>.html``.
    ``verdicts`` maps a page (relative to the site) to ``{"job", "window", "ok", "checks"}``.
    """
    validations = []
    for path in sorted((root / "validations").rglob("*.html")) if (root / "validations").is_dir() else []:
        page = path.relative_to(root).as_posix()
        parts = path.relative_to(root / "validations").parts
        if len(parts) < 4:
            continue
        verdict = verdicts.get(page) or {}
        validations.append(
            {
                "page": page,
                "url": quote(page, safe="/"),
                "suite": ".".join(parts[:-3]),
                "run": unquote(parts[-3]),
                "run_time": parts[-2],
                "ok": verdict.get("ok"),
                "job": verdict.get("job"),
                "checks": verdict.get("checks") or [],
            }
        )
    validations.sort(key=lambda v: (v["run_time"], v["page"]), reverse=True)
    suites = []
    for path in sorted((root / "expectations").rglob("*.html")) if (root / "expectations").is_dir() else []:
        page = path.relative_to(root).as_posix()
        suites.append({"page": page, "url": quote(page, safe="/"), "suite": page[len("expectations/") : -5]})
    return {"validations": validations, "suites": [{**s, "suite": s["suite"].replace("/", ".")} for s in suites]}


def verdicts_by_page(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``dq_results`` rows grouped by their Data Docs page: the latest verdict of each check on it."""
    pages: dict[str, dict[str, Any]] = {}
    for row in rows:
        page = _text(row.get("docs_page"))
        if not page:
            continue
        entry = pages.setdefault(page, {"job": row["job"], "window": row["window"], "checks": {}})
        entry["checks"][row["check"]] = bool(row["success"])
    return {
        page: {**e, "ok": all(e["checks"].values()), "checks": sorted(e["checks"].items())} for page, e in pages.items()
    }


def page_summary(rows: Iterable[Mapping[str, Any]], page: str, versions: str | None = None) -> dict[str, Any] | None:
    """What a validation page checked, for the bar above it: the job, the asset, the window and each check's counts.

    GX's own header reads "Data asset: None" for a dataframe and gives percentages without their counts; the
    ``dq_results`` rows of the page have both (``observed`` unexpected of ``checked``). ``versions``: the scaling
    window's model versions (``v1 → v2``), when the window is an event's. None for a page no row names.
    """
    mine = [r for r in rows if _text(r.get("docs_page")) == page]
    if not mine:
        return None
    parts = page.split("/")
    asset = parts[-4] if parts[0] == "validations" and len(parts) >= 5 else None  # <job>/<asset>/<run>/<time>/<b>
    latest: dict[str, Mapping[str, Any]] = {r["check"]: r for r in mine}
    return {
        "job": mine[0]["job"],
        "asset": asset,
        "window": mine[0]["window"],
        "versions": versions,
        "checks": [
            {
                "check": name,
                "success": bool(r["success"]),
                "unexpected": int(r.get("observed") or 0),
                "checked": int(r.get("checked") or 0),
            }
            for name, r in sorted(latest.items())
        ],
    }


# --- GX's pages, offline ----------------------------------------------------------------------------------------------

_REMOTE = re.compile(r"^(?:https?:)?//", re.IGNORECASE)
_CSS_URL = re.compile(r"url\(\s*(['\"]?)((?:https?:)?//[^'\")]+)\1\s*\)", re.IGNORECASE)
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Rewriter(HTMLParser):
    """Re-emits a page token by token, minus scripts and remote stylesheets; remote images made local."""

    def __init__(self, static: str, known: Iterable[str], head: str, bar: str) -> None:
        super().__init__(convert_charrefs=False)
        self.static, self.head, self.bar = static, head, bar
        self.by_name = {p.rsplit("/", 1)[-1]: p for p in sorted(known, reverse=True)}
        self.out: list[str] = []
        self.skipping = 0  # inside a <script>
        self.in_style = False

    def local(self, url: str) -> str | None:
        """The same file (by name) in GX's static folder, served by the plugin; None when it has none."""
        path = self.by_name.get(url.split("?", 1)[0].rsplit("/", 1)[-1])
        return self.static + path if path else None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skipping or tag == "script":
            self.skipping += tag == "script"
            return
        values = dict(attrs)
        if tag == "link" and _REMOTE.match(values.get("href") or ""):
            return
        if tag == "link" and "icon" in (values.get("rel") or "").lower():  # GX's relative path misses the site's
            attrs = [(k, (self.local("favicon.ico") or "data:,") if k == "href" else v) for k, v in attrs]
            self.out.append(_tag(tag, attrs))
            return
        if tag == "a" and _REMOTE.match(values.get("href") or ""):  # GX's newsletter, its docs: nothing leaves
            self.out.append(_tag(tag, [(k, v) for k, v in attrs if k not in ("href", "target")]))
            return
        if tag == "img" and _REMOTE.match(values.get("src") or ""):
            local = self.local(values["src"] or "")
            if local is None:
                return
            attrs = [(k, local if k == "src" else v) for k, v in attrs]
            self.out.append(_tag(tag, attrs))
            return
        scripted = [(k, v) for k, v in attrs if k.startswith("on") or (v or "").lower().startswith("javascript:")]
        if scripted:  # an inline handler or a javascript: link: the CSP would refuse it with a console error
            self.out.append(_tag(tag, [(k, v) for k, v in attrs if (k, v) not in scripted]))
        else:
            self.out.append(self.get_starttag_text() or _tag(tag, attrs))
        if tag == "head":
            self.out.append(self.head)
        elif tag == "body":
            self.out.append(self.bar)
        self.in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if self.skipping:
            self.skipping -= tag == "script"
            return
        if tag in _VOID:
            return
        self.in_style = False
        self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        if self.in_style:
            data = _CSS_URL.sub(lambda m: f"url('{self.local(m.group(2)) or 'data:,'}')", data)
        self.out.append(data)

    def handle_entityref(self, name: str) -> None:
        if not self.skipping:
            self.out.append(f"&{name};")

    def handle_charref(self, name: str) -> None:
        if not self.skipping:
            self.out.append(f"&#{name};")

    def handle_comment(self, data: str) -> None:
        if not self.skipping:
            self.out.append(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.out.append(f"<!{decl}>")


def _tag(tag: str, attrs: list[tuple[str, str | None]]) -> str:
    from html import escape

    rendered = "".join(f" {k}" if v is None else f' {k}="{escape(v, quote=True)}"' for k, v in attrs)
    return f"<{tag}{rendered}>"


@functools.cache
def static_files(static: Path) -> frozenset[str]:
    """The GX static folder's files, relative to it (``images/logo-long.png``, ...); the package does not change."""
    return frozenset(p.relative_to(static).as_posix() for p in static.rglob("*") if p.is_file())


def rewrite_page(html: str, page: str, known: Iterable[str], chrome: Callable[[str, str], tuple[str, str]]) -> str:
    """A GX page that needs nothing from another site and runs no script, with a bar back to the page.

    ``chrome(up, static)`` renders the page's head additions and its bar (``page.docs_chrome``), given the way
    up to the plugin's root and to its static folder.
    """
    up = "../" * (page.count("/") + 1)  # from the page's folder to the plugin's root (``/elastic-pipelines/``)
    static = up + STATIC_ROUTE.lstrip("/") + "/"
    head, bar = chrome(up, static)
    parser = _Rewriter(static, known, head, bar)
    parser.feed(html)
    parser.close()
    return "".join(parser.out)
