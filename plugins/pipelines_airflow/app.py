"""The "Elastic pipelines" web app: every route of the plugin, mounted in Airflow's api-server.

Served by the ``elastic_pipelines`` plugin (``pipelines_airflow.plugin``)
under ``/elastic-pipelines``; the data comes from ``collect``, ``rescale`` and
``datadocs``, the HTML from the templates (``page.render``):

* ``GET  /``                   the page: every job of the control plane
* ``GET  /api/jobs``           the same data as JSON (``?job=NAME`` narrows it to one job)
* ``GET  /rescale/preview``    the dry run of a rescale (HTML; ``/api/rescale/preview`` as JSON)
* ``POST /rescale``            creates the ``elastic_rescale`` run (form fields ``job``, ``factor``,
  ``reason``), then redirects (303) to
* ``GET  /rescale/run``        the run's confirmation: its state, tasks and note, followed every 5 s
* ``GET  /docs/...``           the home's Data Docs, rewritten to need nothing from elsewhere (``datadocs``)
* ``GET  /docs-static/...``    GX's own styles, fonts and images, from the installed package

Inside Airflow. The Browse menu's entry shows these pages in an iframe that
Airflow 3.3 sandboxes with ``allow-scripts allow-same-origin allow-forms
allow-downloads`` (read from its UI: ``airflow/ui/dist/assets/index-*.js``):
the frame may navigate itself and post forms, not the Airflow window and
not a new tab. So every step of a rescale stays in the frame (preview, post,
confirmation with the run's state), Airflow mirrors the frame's address in
its own (``/plugin/elastic-pipelines/elastic-pipelines/...``, so reload and
back work), and links to Airflow's own pages are followed by the Airflow
window itself (``templates/embed.js``).

Authentication. Plugin apps are mounted beside Airflow's API without its
security, so every route depends on Airflow's own
``requires_access_dag("GET")``: the caller must be logged in (JWT in
``Authorization: Bearer`` or the UI's ``_token`` cookie) and allowed to read
DAGs, or the answer is 401 or 403 (a browser gets a page with a way to log
in). The post also needs the permission to trigger ``elastic_rescale`` and is
refused when its ``Origin`` names another site.

The app is built on its first request (:class:`LazyApp`): Airflow imports
plugins in every process, task processes included, and they need neither
FastAPI's routes nor the api-server's security modules.

No ``from __future__ import annotations`` here: FastAPI resolves the route
functions' annotations at definition time, and they name locally imported types.
"""

import threading
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import urlencode

from pipelines_airflow import collect, datadocs, rescale
from pipelines_airflow.page import TITLE, docs_chrome, plain, render

URL_PREFIX = datadocs.PLUGIN_ROOT
FORM_FIELDS = "a rescale takes the fields job, factor and reason"


def render_page(data: Any) -> str:
    """The page of every job (``collect.collect``'s data)."""
    from pipelines.core.hashing import max_factor

    try:
        limit: int | None = max_factor()
    except Exception:  # a bad PIPELINES_MAX_FACTOR: the form still renders, the server refuses with the reason
        limit = None
    return render("page.html", data=data, max_factor=limit, default_reason=rescale.DEFAULT_REASON)


def create_app() -> Any:
    """The FastAPI app; every route requires a logged-in Airflow user allowed to read DAGs."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import get_user, requires_access_dag
    from fastapi import Depends, FastAPI, Form, Query, Request
    from fastapi.exceptions import HTTPException, RequestValidationError
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
    from pydantic import BaseModel

    from pipelines.core.limits import shown
    from pipelines.errors import PipelinesError, UnknownJobError
    from pipelines.storage.home import resolve_home

    app = FastAPI(
        title=TITLE,
        description="Jobs, job models, scaling events and data-quality verdicts of the elastic pipelines",
        dependencies=[Depends(requires_access_dag("GET"))],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    fresh = {"Cache-Control": "no-store"}

    def wants_json(request: Request) -> bool:
        accept = request.headers.get("accept", "")
        return "application/json" in accept and "text/html" not in accept

    @app.exception_handler(HTTPException)
    async def _refused(request: Request, exc: HTTPException) -> Any:
        # a browser gets a short page with a way to log in; API clients get Airflow's usual JSON
        if exc.status_code in (401, 403) and "text/html" in request.headers.get("accept", ""):
            text = "Log in to Airflow to see this page." if exc.status_code == 401 else "You may not read DAGs."
            page = render(
                "denied.html", status=exc.status_code, detail=exc.detail, text=text, login=_login_url(str(request.url))
            )
            return HTMLResponse(page, status_code=exc.status_code)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Any:
        # FastAPI's own answer echoes each bad input whole (an uploaded file's internals): name the field instead
        said = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'request'}: {e.get('msg')}" for e in exc.errors()
        )
        return JSONResponse({"detail": said}, status_code=422)

    async def form_fields(request: Request) -> list[str]:
        """The names a post carries: FastAPI fills the declared fields and drops the rest, and a dropped
        ``dry_run=true`` made a real rescale. A body that is no form fills none of them ("name the job")."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in ("application/x-www-form-urlencoded", "multipart/form-data"):
            raise HTTPException(
                status_code=415, detail=f"post the rescale as a form, not {kind or 'no content type'}: {FORM_FIELDS}"
            )
        form = await request.form()
        if any(not isinstance(value, str) for _, value in form.multi_items()):
            raise HTTPException(status_code=422, detail=f"a rescale's fields are text, not files: {FORM_FIELDS}")
        return [name for name, _ in form.multi_items()]

    # --- the page ------------------------------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, job: str | None = Query(default=None)) -> Any:
        try:
            return HTMLResponse(render_page(collect.collect(job)), headers=fresh)
        except UnknownJobError as e:
            return refused(request, str(e), 404, "./")

    @app.get("/api/jobs")
    def jobs(job: str | None = Query(default=None)) -> JSONResponse:
        try:
            return JSONResponse(collect.collect(job), headers=fresh)
        except UnknownJobError as e:
            raise HTTPException(status_code=404, detail=str(e)) from None

    @app.get("/index.html", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse("./")

    # --- the rescale ---------------------------------------------------------------------------------------------

    def refused(request: Request, message: str, status: int, back: str) -> Any:
        if wants_json(request):
            return JSONResponse({"detail": message}, status_code=status)
        return HTMLResponse(render("refusal.html", message=message, status=status, back=back), status_code=status)

    class PreviewQuery(BaseModel):
        """The preview's query, the same on its page and its JSON: what the rescale form would submit."""

        job: str = ""
        factor: str = ""
        reason: str = rescale.DEFAULT_REASON

    def compute(query: PreviewQuery) -> tuple[dict[str, Any] | None, str | None]:
        try:
            return rescale.preview(resolve_home(), query.job, query.factor, query.reason), None
        except PipelinesError as e:  # bad input or a refused plan: the platform's message, not a 500
            return None, str(e)

    @app.get("/rescale/preview", response_class=HTMLResponse)
    def preview_page(query: Annotated[PreviewQuery, Query()]) -> HTMLResponse:
        result, error = compute(query)
        dag = rescale.dag_state() if result else {}
        context = {"job": query.job, "factor": query.factor, "reason": query.reason or rescale.DEFAULT_REASON}
        page = render("preview.html", result=plain(result), error=error, dag_id=rescale.RESCALE_DAG, dag=dag, **context)
        return HTMLResponse(page, status_code=400 if error else 200, headers=fresh)

    @app.get("/api/rescale/preview")
    def preview_json(query: Annotated[PreviewQuery, Query()]) -> JSONResponse:
        result, error = compute(query)
        if error is not None or result is None:
            return JSONResponse({"detail": error}, status_code=400)
        return JSONResponse(plain({**result, "dag": rescale.dag_state()}), headers=fresh)

    @app.post(
        "/rescale",
        dependencies=[Depends(requires_access_dag("POST", DagAccessEntity.RUN, param_dag_id=rescale.RESCALE_DAG))],
    )
    def trigger(
        request: Request,
        user: Annotated[Any, Depends(get_user)],
        fields: Annotated[list[str], Depends(form_fields)],
        job: str = Form(default=""),
        factor: str = Form(default=""),
        reason: str = Form(default=rescale.DEFAULT_REASON),
    ) -> Any:
        back = "./?" + urlencode({"job": job}) if job else "./"
        if not rescale.same_origin(request.headers.get("origin"), request.headers.get("host")):
            return refused(request, "refused: the form was posted from another site", 403, back)
        unknown = sorted(set(fields) - {"job", "factor", "reason"})
        if unknown:
            said = f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(shown, unknown))}"
            return refused(request, f"{said}: {FORM_FIELDS} (a dry run is the preview)", 400, back)
        twice = sorted({name for name in fields if fields.count(name) > 1})
        if twice:
            return refused(request, f"field {', '.join(twice)} given more than once: {FORM_FIELDS}", 400, back)
        try:
            checked = rescale.rescale_request(resolve_home(), job, factor, reason)
            run = rescale.trigger_run(rescale.RESCALE_DAG, rescale.run_conf(checked), user.get_name())
        except (PipelinesError, rescale.RunRefused) as e:
            return refused(request, str(e), 400, back)
        if wants_json(request):
            return JSONResponse({**run, "url": datadocs.run_url(run["dag_id"], run["run_id"])}, status_code=201)
        query = urlencode({"dag_id": run["dag_id"], "run_id": run["run_id"], "created": "1"})
        return RedirectResponse(f"rescale/run?{query}", status_code=303)  # a GET: reloading never posts again

    @app.get("/rescale/run", response_class=HTMLResponse)
    def triggered(
        dag_id: str = Query(default=rescale.RESCALE_DAG), run_id: str = Query(default=""), created: str = Query("")
    ) -> HTMLResponse:
        if dag_id != rescale.RESCALE_DAG:
            raise HTTPException(status_code=404, detail=f"this page follows runs of {rescale.RESCALE_DAG} only")
        run = rescale.run_state(dag_id, run_id)
        if run is None:
            raise HTTPException(status_code=404, detail=f"no run {run_id!r} of {dag_id}")
        page = render(
            "triggered.html",
            run=run,
            created=bool(created),
            paused=bool(rescale.dag_state(dag_id).get("paused")),
            run_url=datadocs.run_url(dag_id, run_id, depth=2),
        )
        return HTMLResponse(page, headers=fresh)

    # --- Data Docs -----------------------------------------------------------------------------------------------

    @app.get(datadocs.DOCS_ROUTE, include_in_schema=False)
    def docs_root() -> RedirectResponse:
        return RedirectResponse(datadocs.DOCS_ROUTE.lstrip("/") + "/")

    @app.get(datadocs.DOCS_ROUTE + "/{page:path}", include_in_schema=False)
    def docs(page: str) -> Response:
        home = resolve_home()
        root = datadocs.site_root(home)
        if page in ("", "index.html"):
            verdicts = datadocs.verdicts_by_page(_dq_rows(home))
            index = datadocs.site_index(root, verdicts)
            return HTMLResponse(render("docs_index.html", index=index, root=str(root)), headers=fresh)
        found = datadocs.resolve_page(root, page)
        if found is None:
            detail = "no such Data Docs page" if root.is_dir() else "no Data Docs yet: no validation has built them"
            raise HTTPException(status_code=404, detail=detail)
        headers = {"Content-Security-Policy": datadocs.CSP, **fresh}
        if found.suffix != ".html":
            return FileResponse(found, headers=headers)
        known = datadocs.static_files(datadocs.gx_static())
        summary = _page_summary(home, page)
        html = datadocs.rewrite_page(
            found.read_text(encoding="utf-8"), page, known, lambda up, static: docs_chrome(up, static, summary)
        )
        return HTMLResponse(html, headers=headers)

    @app.get(datadocs.STATIC_ROUTE + "/{path:path}", include_in_schema=False)
    def docs_static(path: str) -> FileResponse:
        found = datadocs.resolve_page(datadocs.gx_static(), path) if path else None
        if found is None:
            raise HTTPException(status_code=404, detail="no such file in great_expectations' static folder")
        return FileResponse(found, headers={"Cache-Control": "max-age=86400"})

    return app


def _page_summary(home: Any, page: str) -> dict[str, Any] | None:
    """What the page checked (``datadocs.page_summary``), with its scaling window's model versions; None when the
    control plane cannot say (the page is still served, as GX wrote it)."""
    try:
        summary = datadocs.page_summary(_dq_rows(home), page)
        if summary is not None and str(summary["window"]).startswith("event:"):
            from pipelines.control import ControlPlane

            event_id = str(summary["window"]).removeprefix("event:")
            for e in ControlPlane(home).events.history(summary["job"]):
                if e.event_id == event_id:
                    summary["versions"] = f"v{e.from_version} → v{e.to_version}"
        return summary
    except Exception:  # an unreadable table costs the bar its summary, never the page
        return None


def _dq_rows(home: Any) -> list[dict[str, Any]]:
    from pipelines.control import ControlPlane

    table = ControlPlane(home).dq_results
    return [r for job in sorted(table.table.jobs()) for r in table.read(job).to_dict("records")]


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
