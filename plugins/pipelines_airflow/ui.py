"""The "Elastic pipelines" page of the Airflow UI: every job of the control plane, as the operators need it.

Served by the ``elastic_pipelines`` plugin (``plugins/elastic_pipelines_plugin.py``)
as a FastAPI app mounted in Airflow's api-server under ``/elastic-pipelines``:

* ``GET /elastic-pipelines/``          the page (server-rendered HTML, no build step)
* ``GET /elastic-pipelines/api/jobs``  the same data as JSON (``?job=NAME`` narrows it to one job)
* ``GET /elastic-pipelines/docs/...``  the home's Data Docs site (``datadocs``)
* ``GET /elastic-pipelines/rescale/preview``, ``POST /elastic-pipelines/rescale``  the rescale form (``forms``)

Per job it shows the active model (version, elasticity factor, grouper, virtual
tasks, partitions per input and whether the input has grown since), the latest
scaling events (kind, factor from → to, status, downtime, records replayed,
data-quality verdict), the latest data-quality verdicts, the latest autosize
decisions (when ``pipelines.control.decisions`` and its table exist) and
whether a scaling lock is held (when ``pipelines.control.locks`` exists), and
the job's adjunct data stores (``pipelines.adjunct.inspect.describe_stores``).

Authentication. Plugin apps are mounted beside Airflow's API without its
security, so every route here depends on Airflow's own
``airflow.api_fastapi.core_api.security.requires_access_dag("GET")``: the
caller must be logged in (JWT in ``Authorization: Bearer`` or the UI's
``_token`` cookie) and allowed to read DAGs, or the answer is 401 (no or bad
credentials) or 403 (not allowed).

The control plane is read from ``PIPELINES_HOME`` (``resolve_home()``), fresh
on every request. The app is built on its first request (:class:`LazyApp`):
Airflow imports plugins in every process, task processes included, and they
need neither FastAPI's routes nor the api-server's security modules.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import importlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipelines_airflow import datadocs, forms, observe
from pipelines_airflow.page import BASE_CSS, TITLE
from pipelines_airflow.page import plain as _plain

URL_PREFIX = "/elastic-pipelines"
EVENTS_SHOWN = 10
DQ_WINDOWS_SHOWN = 5
DECISIONS_SHOWN = 10
REFRESH_S = 30


# --- data -------------------------------------------------------------------------------------------------------------


def collect(job: str | None = None, home: Any = None) -> dict[str, Any]:
    """Everything the page shows, as plain JSON-able data: ``{"home", "generated_at", "jobs": [...]}``."""
    from pipelines.control import ControlPlane
    from pipelines.control.home import resolve_home

    home = home if home is not None else resolve_home()
    control = ControlPlane(home)
    names = control.job_models.jobs()
    if job is not None:
        names = [n for n in names if n == job]
    return {
        "home": str(home.root),
        "generated_at": _now(),
        "jobs": [job_status(control, home, name) for name in names],
    }


def job_status(control: Any, home: Any, job: str) -> dict[str, Any]:
    """One job's state; each section fails alone (its error is shown) instead of failing the page."""
    status: dict[str, Any] = {"job": job, "errors": {}}
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("model", lambda: _model(control, home, job)),
        ("scaling_events", lambda: _scaling_events(control, job)),
        ("dq", lambda: _dq(control, job)),
        ("autosize_decisions", lambda: _decisions(home, job)),
        ("lock", lambda: _lock(home, job)),
        ("stores", lambda: _stores(home, job)),
        ("observe", lambda: observe.section(control, home, job)),  # plots, virtual tasks, inputs
    ]
    for name, read in sections:
        try:
            status[name] = read()
        except Exception as e:  # a section's failure is information, not a 500
            status[name] = None
            status["errors"][name] = f"{type(e).__name__}: {e}"
    return _plain(status)


def _model(control: Any, home: Any, job: str) -> dict[str, Any]:
    model = control.job_models.active(job)
    inputs = []
    for stream, partitions in sorted(model.partitions().items(), key=lambda kv: str(kv[0])):
        now = None
        try:
            from pipelines.systems.registry import open_system

            now = open_system(stream.system, home).describe(stream.stream).partition_count
        except Exception:  # an input we cannot describe here: show what the model saw
            now = None
        inputs.append({"input": str(stream), "partitions": partitions, "partitions_now": now})
    activations = [h for h in control.job_models.history(job) if h["event"] == "activated" and h.get("active")]
    return {
        "version": model.version,
        "latest_version": control.job_models.latest_version(job),
        "factor": model.elasticity_factor,
        "grouper": model.grouper,
        "virtual_tasks": model.task_count,
        "containers": len(model.containers),
        "inputs": inputs,
        "tasks": [str(t.task_name) for t in model.tasks()],
        "activated_at": activations[-1]["created_at"] if activations else None,
        "activation_reason": activations[-1]["reason"] if activations else None,
    }


def _scaling_events(control: Any, job: str) -> list[dict[str, Any]]:
    events = control.events.history(job)[-EVENTS_SHOWN:]
    rows = []
    for e in reversed(events):  # newest first
        details = dict(e.details or {})
        duration = (e.finished_at - e.started_at).total_seconds() if e.finished_at and e.started_at else None
        rows.append(
            {
                "event_id": e.event_id,
                "kind": e.kind,
                "status": e.status,
                "from_version": e.from_version,
                "to_version": e.to_version,
                "from_factor": e.from_factor,
                "to_factor": e.to_factor,
                "started_at": e.started_at,
                "finished_at": e.finished_at,
                "duration_s": duration,
                "mode": details.get("mode"),  # in-place (a live driver switched) or cold (a catch-up run)
                "downtime_s": details.get("downtime_s"),
                "records_replayed": details.get("records_replayed"),
                "caught_up_s": details.get("caught_up_s"),
                "failed_after": details.get("failed_after"),
                "dq": details.get("dq"),
                "reason": details.get("reason"),
            }
        )
    return rows


def _dq(control: Any, job: str) -> list[dict[str, Any]]:
    frame = control.dq_results.read(job)
    if frame is None or len(frame) == 0:
        return []
    rows = frame.to_dict("records")
    windows: dict[str, list[dict[str, Any]]] = {}
    for row in rows:  # oldest first: a window's latest validation replaces an earlier one of the same checks
        windows.setdefault(row["window"], []).append(row)
    latest = sorted(windows.items(), key=lambda kv: max(r["run_at"] for r in kv[1]), reverse=True)
    result = []
    for window, checks in latest[:DQ_WINDOWS_SHOWN]:
        by_check: dict[str, dict[str, Any]] = {}
        for r in checks:
            by_check[r["check"]] = r
        result.append(
            {
                "window": window,
                "run_at": max(r["run_at"] for r in by_check.values()),
                "ok": all(bool(r["success"]) for r in by_check.values()),
                **datadocs.window_fields(by_check.values()),  # the DAG run that produced it
                "checks": [
                    {
                        "check": name,
                        "success": bool(r["success"]),
                        "observed": r["observed"],
                        "checked": r["checked"],
                        "examples": r.get("examples"),
                        **datadocs.check_fields(r),  # its Data Docs page, its first offenders
                    }
                    for name, r in by_check.items()
                ],
            }
        )
    return result


def _decisions(home: Any, job: str) -> list[dict[str, Any]] | None:
    """The latest autosize decisions, newest first; None when the module or its table does not exist."""
    module = _optional("pipelines.control.decisions")
    if module is None or not hasattr(module, "read_decisions"):
        return None
    from pipelines.deltaio import is_table

    if not is_table(home.control_table("autosize_decisions")):
        return None
    rows = _records(module.read_decisions(home, job))
    order = next((k for k in ("decided_at", "at", "recorded_at", "created_at") if rows and k in rows[0]), None)
    if order is not None:
        rows.sort(key=lambda r: (r.get(order) is None, r.get(order)))
    return [{k: v for k, v in r.items() if k != "job"} for r in reversed(rows[-DECISIONS_SHOWN:])]


def _lock(home: Any, job: str) -> dict[str, Any] | None:
    """The scaling lock's state; None when this version has no locks module."""
    module = _optional("pipelines.control.locks")
    if module is None or not hasattr(module, "ScalingLock"):
        return None
    state = module.ScalingLock(home).state(job)
    if state is None:
        return {"held": False, "status": "never taken"}
    return {
        "held": bool(state.held),
        "status": state.status,
        "owner": state.owner,
        "operation": state.operation,
        "expires_at": state.expires_at,
        "since": state.at,
        "describe": state.describe() if state.held else None,
    }


def _stores(home: Any, job: str) -> list[dict[str, Any]] | None:
    """The job's adjunct stores (position, size, version, validity, last bootstrap); None without the module."""
    module = _optional("pipelines.adjunct.inspect")
    if module is None:
        return None
    return module.describe_stores(home, job) or None


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):  # the module itself is missing, not one of its imports
            return None
        raise


def _records(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # pandas
        return list(value.to_dict("records"))
    if hasattr(value, "to_pylist"):  # pyarrow
        return list(value.to_pylist())
    rows = []
    for item in value:
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            rows.append(dataclasses.asdict(item))
        elif isinstance(item, Mapping):
            rows.append(dict(item))
        else:
            rows.append(dict(vars(item)))
    return rows


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# --- page -------------------------------------------------------------------------------------------------------------

CSS = BASE_CSS + forms.CSS


# Reload every REFRESH_S, but never under an operator who is typing a factor into a job's rescale form
# (a meta refresh would wipe the field): a focused or edited form field holds the reload back.
_REFRESH_SCRIPT = (
    "<script>document.addEventListener('input',function(e){e.target.dataset.edited='1';});"
    "setInterval(function(){var a=document.activeElement;"
    "if(a&&/^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName))return;"
    "if(document.querySelector('[data-edited]'))return;location.reload();},%d);</script>"
)


def render_page(data: Mapping[str, Any]) -> str:
    jobs = data.get("jobs") or []
    body = "".join(_job_card(j) for j in jobs) if jobs else '<p class="muted">No job has a model in this home yet.</p>'
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{TITLE}</title><style>{CSS}</style>{_REFRESH_SCRIPT % (REFRESH_S * 1000)}</head><body>"
        f"<h1>{TITLE}</h1>"
        f"<div class='sub'>{len(jobs)} job(s) in <code>{_e(data.get('home'))}</code> · "
        f"read at {_e(_short_time(data.get('generated_at')))} UTC · "
        f"<a href='api/jobs'>JSON</a> · refreshes every {REFRESH_S} s</div>"
        f"{body}</body></html>"
    )


def _job_card(job: Mapping[str, Any]) -> str:
    name = job["job"]
    model = job.get("model")
    lock = job.get("lock")
    parts = [f"<section class='job' id='job-{_e(name)}' data-job='{_e(name)}'><div class='head'>"]
    parts.append(f"<h2 class='job-name'>{_e(name)}</h2>")
    if lock is not None:
        if lock.get("held"):
            parts.append(f"<span class='pill warn lock' title='{_e(lock.get('describe'))}'>scaling lock held</span>")
            parts.append(f"<span class='muted'>{_e(lock.get('owner'))} · {_e(lock.get('operation'))}</span>")
        else:
            parts.append("<span class='pill ok lock'>no scaling lock</span>")
    parts.append("</div>")
    if model:
        inputs = ", ".join(
            f"{_e(i['input'])}: {_e(i['partitions'])}"
            + (
                f" <span class='pill warn'>now {_e(i['partitions_now'])}</span>"
                if i.get("partitions_now") not in (None, i["partitions"])
                else ""
            )
            for i in model["inputs"]
        )
        facts = [
            ("model version", f"v{model['version']}", "model-version"),
            ("elasticity factor", model["factor"], "factor"),
            ("grouper", model["grouper"], "grouper"),
            ("virtual tasks", model["virtual_tasks"], "virtual-tasks"),
            ("containers", model["containers"], "containers"),
        ]
        parts.append("<div class='facts'>")
        for label, value, cls in facts:
            parts.append(f"<div class='fact {cls}'><div class='k'>{label}</div><div class='v'>{_e(value)}</div></div>")
        parts.append(
            f"<div class='fact inputs'><div class='k'>partitions per input</div><div class='v'>{inputs}</div></div>"
        )
        parts.append("</div>")
        if model.get("latest_version") not in (None, model["version"]):
            parts.append(
                f"<p><span class='pill warn'>model v{_e(model['latest_version'])} is planned but not active</span></p>"
            )
        parts.append(
            f"<details><summary>{len(model['tasks'])} virtual tasks · active since "
            f"{_e(_short_time(model.get('activated_at')))} ({_e(model.get('activation_reason'))})</summary>"
            f"<div class='mono'>{_e(', '.join(model['tasks']))}</div></details>"
        )
    parts.append(observe.html(job.get("observe")))
    parts.append(forms.rescale_form(job))
    parts.append(_events_table(job.get("scaling_events")))
    parts.append(_dq_table(job.get("dq")))
    if job.get("autosize_decisions") is not None:
        parts.append(_decisions_table(job["autosize_decisions"]))
    if job.get("stores"):
        parts.append(_stores_table(job["stores"]))
    for section, error in (job.get("errors") or {}).items():
        parts.append(f"<div class='err'>{_e(section)}: {_e(error)}</div>")
    parts.append("</section>")
    return "".join(parts)


def _events_table(events: list[dict[str, Any]] | None) -> str:
    if events is None:
        return ""
    head = "<h3>Latest scaling events</h3>"
    if not events:
        return head + "<p class='muted'>No scaling event yet.</p>"
    cols = ["kind", "factor", "model", "status", "started", "took", "downtime", "caught up", "records replayed"]
    cols += ["dq", "reason"]
    rows = []
    for e in events:
        after = f" after {e['failed_after']}" if e.get("failed_after") else ""
        kind = _e(e["kind"]) + (f" <span class='muted'>· {_e(e['mode'])}</span>" if e.get("mode") else "")
        rows.append(
            [
                kind,
                f"{_e(_dash(e['from_factor']))} → {_e(_dash(e['to_factor']))}",
                f"v{_e(_dash(e['from_version']))} → v{_e(_dash(e['to_version']))}",
                f"<span class='pill {_status_class(e)}' title='{_e(after.strip())}'>{_e(e['status'])}</span>",
                _e(_short_time(e["started_at"])),
                _e(_seconds(e["duration_s"])),
                _e(_seconds(e["downtime_s"])),
                _e(_seconds(e["caught_up_s"])),
                _e(_dash(e["records_replayed"])),
                _verdict(e["dq"]),
                _e(_dash(e["reason"])),
            ]
        )
    return head + _table(cols, rows, "events")


BAD_STATUSES = {"failed", "dq failed", "error"}
UNDONE_STATUSES = {"rolled back"}


def _status_class(event: Mapping[str, Any]) -> str:
    """Red for a failure, amber for a rollback, blue while in progress (not finished), green once done."""
    if event["status"] in BAD_STATUSES:
        return "bad"
    if event["status"] in UNDONE_STATUSES:
        return "warn"
    return "info" if event.get("finished_at") is None else "ok"


def _dq_table(windows: list[dict[str, Any]] | None) -> str:
    if windows is None:
        return ""
    head = "<h3>Latest data-quality verdicts</h3>"
    if not windows:
        return head + "<p class='muted'>No validation yet.</p>"
    rows = []
    for w in windows:
        checks = " ".join(datadocs.check_cell(c) for c in w["checks"])  # links to Data Docs, first offenders
        verdict = _verdict("PASS" if w["ok"] else "FAIL")
        rows.append([_e(w["window"]), _e(_short_time(w["run_at"])), verdict, checks, datadocs.origin_cell(w)])
    cols = ["window", "run at", "verdict", "checks (offending/checked) · Data Docs", "produced by"]
    return head + _table(cols, rows, "dq")


def _stores_table(stores: list[dict[str, Any]]) -> str:
    rows = []
    for st in stores:
        boot = st.get("last_bootstrap") or {}
        positions = " ".join(f"{p}:{v}" for p, v in sorted((st.get("positions") or {}).items()))
        state = st.get("state")
        pill = {"valid": "ok", "absent": "warn"}.get(str(state), "bad")
        generation = f" / g{_e(st['generation'])}" if st.get("dataset") == "bounded" else ""
        rows.append(
            [
                _e(st["store"]),
                _e(f"{st['input']} · {st['partitioning']} · {st['persistence']}"),
                f"<span class='pill {pill}' title='{_e(st.get('validity') or '')}'>{_e(state)}</span>",
                _e(_dash(st.get("version"))) + generation,
                _e(_dash(st.get("snapshot_entries"))),
                _e(_dash(st.get("bytes"))),
                f"<span class='mono'>{_e(positions or '-')}</span>",
                _e(_short_time(boot.get("finished_at")) if boot.get("finished_at") else "-"),
            ]
        )
    head = "<h3>Adjunct data stores</h3>"
    columns = ["store", "input", "validity", "version", "entries", "bytes", "stream position", "last bootstrap"]
    return head + _table(columns, rows, "stores")


def _decisions_table(decisions: list[dict[str, Any]]) -> str:
    head = "<h3>Latest autosize decisions</h3>"
    if not decisions:
        return head + "<p class='muted'>No decision yet.</p>"
    if all({"action", "current_factor", "target_factor"} <= set(d) for d in decisions):
        rows = []
        for d in decisions:
            action_cls = {"up": "warn", "down": "info"}.get(str(d["action"]), "ok")
            reasons = d.get("reasons")
            reasons = "; ".join(map(str, reasons)) if isinstance(reasons, list) else _dash(reasons)
            observation = d.get("observation")
            seen = (
                f"<details><summary>observation</summary><div class='mono'>{_e(_cell(observation))}</div></details>"
                if observation
                else "–"
            )
            rows.append(
                [
                    _e(_short_time(d.get("decided_at"))),
                    f"v{_e(_dash(d.get('model_version')))}",
                    f"<span class='pill {action_cls}'>{_e(d['action'])}</span>",
                    f"{_e(d['current_factor'])} → {_e(d['target_factor'])}",
                    _e(_dash(d.get("policy"))),
                    _e(reasons),
                    seen,
                ]
            )
        cols = ["decided at", "model", "action", "factor", "policy", "reasons", ""]
        return head + _table(cols, rows, "decisions")
    cols: list[str] = []
    for d in decisions:
        cols += [k for k in d if k not in cols]
    rows = [[_e(_cell(d.get(c))) for c in cols] for d in decisions]
    return head + _table([c.replace("_", " ") for c in cols], rows, "decisions")


def _table(cols: Iterable[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict(value: Any) -> str:
    if value is None:
        return "<span class='muted'>–</span>"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if isinstance(value, Mapping):
        ok = value.get("ok", value.get("success"))
        cls = "ok" if ok is True else "bad" if ok is False else "info"
    else:
        upper = str(value).upper()
        cls = "ok" if upper in ("PASS", "OK", "TRUE", "SUCCESS") else "bad" if upper in ("FAIL", "FALSE") else "info"
    return f"<span class='pill {cls}'>{_e(text)}</span>"


def _cell(value: Any) -> str:
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        return _short_time(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping | list):
        return json.dumps(value, default=str)
    return _dash(value)


def _short_time(value: Any) -> str:
    if not value:
        return "–"
    return str(value).replace("T", " ")[:19]


def _seconds(value: Any) -> str:
    return "–" if value is None else f"{float(value):.1f} s"


def _dash(value: Any) -> str:
    return "–" if value is None else str(value)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# --- app --------------------------------------------------------------------------------------------------------------


def create_app() -> Any:
    """The FastAPI app; every route requires a logged-in Airflow user allowed to read DAGs."""
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI, Query, Request
    from fastapi.exceptions import HTTPException
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

    app = FastAPI(
        title=TITLE,
        description="Jobs, job models, scaling events and data-quality verdicts of the elastic pipelines",
        dependencies=[Depends(requires_access_dag("GET"))],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(HTTPException)
    async def _refused(request: Request, exc: HTTPException) -> Any:
        # a browser gets a short page with a way to log in; API clients get Airflow's usual JSON
        if exc.status_code in (401, 403) and "text/html" in request.headers.get("accept", ""):
            login = _login_url(str(request.url))
            text = "Log in to Airflow to see this page." if exc.status_code == 401 else "You may not read DAGs."
            return HTMLResponse(
                f"<!DOCTYPE html><html><head><title>{TITLE}: {exc.status_code}</title></head><body>"
                f"<h1>{exc.status_code} {_e(exc.detail)}</h1>"
                f"<p>{text} <a href='{_e(login)}'>Log in</a></p></body></html>",
                status_code=exc.status_code,
            )
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.get("/", response_class=HTMLResponse)
    def page(job: str | None = Query(default=None)) -> HTMLResponse:
        return HTMLResponse(render_page(collect(job)), headers={"Cache-Control": "no-store"})

    @app.get("/api/jobs")
    def jobs(job: str | None = Query(default=None)) -> JSONResponse:
        return JSONResponse(collect(job), headers={"Cache-Control": "no-store"})

    @app.get("/index.html", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse("./")

    datadocs.add_routes(app)  # the home's Data Docs site, behind the same login
    forms.add_routes(app)  # the rescale preview and trigger

    return app


def _login_url(next_url: str) -> str:
    try:
        from airflow.api_fastapi.app import get_auth_manager

        return get_auth_manager().get_url_login(next_url=next_url)
    except Exception:  # no auth manager in this process: Airflow's home page leads to the login
        return "../"


class LazyApp:
    """An ASGI app that builds ``factory()`` on its first request (only the api-server ever sends one)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._app: Any = None
        self._lock = threading.Lock()

    @property
    def app(self) -> Any:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._factory()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    def __repr__(self) -> str:
        return f"{__name__}.app"


app = LazyApp(create_app)
