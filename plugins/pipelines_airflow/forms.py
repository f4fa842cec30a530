"""The rescale form of the "Elastic pipelines" page: see the planned model, then trigger ``elastic_rescale``.

Per job the page shows the current factor and a number field (1 to the
largest factor allowed, ``PIPELINES_MAX_FACTOR``); "Preview" opens

* ``GET /elastic-pipelines/rescale/preview?job=J&factor=N`` (HTML; the same as
  JSON at ``/elastic-pipelines/api/rescale/preview``): the dry run. It runs the
  planning of ``elastic_rescale``'s ``plan`` task (``scaling.validate`` then
  ``planning.plan_next``), writes nothing and takes no lock, and shows the
  model it would make: version, factor, virtual tasks (added and retired),
  partitions, checkpoints, and whether a scaling lock or a paused DAG would
  hold the run up. Its "Trigger" button posts to
* ``POST /elastic-pipelines/rescale`` (form fields ``job``, ``factor``,
  ``reason``): validates the request again (a stale preview or a hand-made
  post gets the same refusal), creates a manual run of ``elastic_rescale``
  with ``{"job", "factor", "reason", "dry_run": false}`` as Airflow's own
  ``POST /api/v2/dags/{dag_id}/dagRuns`` would (same conf validation against
  the DAG's Params), and redirects (303) to the run's page in Airflow's UI
  (JSON ``{"dag_id", "run_id", "url", ...}`` with 201 for an API client).

Permissions. Reading needs what the whole page needs (DAG read access); the
post also needs Airflow's permission to trigger ``elastic_rescale``
(``requires_access_dag("POST", DagAccessEntity.RUN)``), checked by Airflow's
auth manager. A post carrying an ``Origin`` of another site is refused (the
UI's cookie is ``SameSite=Lax`` already; this is the second lock on the door).

Bad input (a factor out of range or not a number, an unknown job, no reason)
is answered 400 with the platform's own message, never a 500.

No ``from __future__ import annotations`` here: FastAPI resolves the route
functions' annotations at definition time, and they name locally imported types.
"""

import html
import json
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlencode, urlparse

RESCALE_DAG = "elastic_rescale"
FORM_ROUTE = "/rescale"
PREVIEW_ROUTE = "/rescale/preview"
PREVIEW_API_ROUTE = "/api/rescale/preview"
DEFAULT_REASON = "manual rescale from the Elastic pipelines page"
TASKS_NAMED = 16  # task names listed per side of a change; the counts are always complete


# --- logic (no Airflow): the dry run and the checks of a request ------------------------------------------------------


def parse_factor(raw: object) -> int:
    """The factor a form sent, or the ConfigError that says what is allowed."""
    from pipelines.core.hashing import MAX_FACTOR_ENV, max_factor, validate_factor
    from pipelines.errors import ConfigError

    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise ConfigError(f"give an elasticity factor: a whole number from 1 to {max_factor()} ({MAX_FACTOR_ENV})")
    return validate_factor(raw.strip() if isinstance(raw, str) else raw)


def rescale_request(home: Any, job: str, factor: object, reason: str | None = None) -> Any:
    """The request the form stands for, checked as ``elastic_rescale``'s ``validate`` task checks it."""
    from pipelines.errors import ConfigError
    from pipelines.operations import scaling

    if not isinstance(job, str) or not job.strip():
        raise ConfigError("name the job to rescale")
    request = scaling.ScalingRequest(job.strip(), parse_factor(factor), (reason or DEFAULT_REASON).strip())
    scaling.validate(home, request)  # reason, factor, known job (UnknownJobError names the known ones)
    return request


def preview(home: Any, job: str, factor: object, reason: str | None = None) -> dict[str, Any]:
    """The dry run: the plan ``elastic_rescale`` would make now, and how it differs from the model in force.

    Same planning as the DAG's ``plan`` task (``scaling.plan``: validate, then
    ``planning.plan_next``); nothing is written and no lock is taken, so a
    preview never stands in the way of a running scaling operation.
    """
    from pipelines import planning
    from pipelines.control.locks import ScalingLock
    from pipelines.core.hashing import max_factor

    request = rescale_request(home, job, factor, reason)
    version = planning.plan_next(home, request.job, factor=request.factor, grouper=request.grouper)
    plan = version.summary()
    plan.update(kind=request.kind, reason=request.reason)  # what scaling.plan returns to the DAG
    current = version.previous
    assert current is not None  # plan_next always plans from the active model
    old = [str(t.task_name) for t in current.tasks()]
    new = [str(t.task_name) for t in version.model.tasks()]
    added = [t for t in new if t not in set(old)]
    retired = [t for t in old if t not in set(new)]
    lock = ScalingLock(home).state(request.job)
    return {
        "job": request.job,
        "request": request.to_dict(),
        "plan": plan,
        "current": {
            "version": current.version,
            "factor": current.elasticity_factor,
            "grouper": current.grouper,
            "virtual_tasks": current.task_count,
            "partitions": {str(s): n for s, n in current.partitions().items()},
        },
        "changes": describe_changes(plan, current.task_count, len(added), len(retired)),
        "tasks_added": {"count": len(added), "names": added[:TASKS_NAMED]},
        "tasks_retired": {"count": len(retired), "names": retired[:TASKS_NAMED]},
        "lock": lock.describe() if lock is not None and lock.held else None,
        "max_factor": max_factor(),
        "conf": run_conf(request),
    }


def describe_changes(plan: Mapping[str, Any], tasks_before: int, added: int, retired: int) -> list[str]:
    """What the run would change, one line each, in the operator's words."""
    if not plan["changes"]:
        return [
            f"nothing: {plan['job']} already runs factor {plan['from_factor']} with this grouper and these "
            "partitions (the run would stop after planning)"
        ]
    lines = []
    if plan["from_factor"] != plan["to_factor"]:
        lines.append(f"elasticity factor {plan['from_factor']} → {plan['to_factor']}")
    lines.append(f"virtual tasks {tasks_before} → {plan['virtual_tasks']} ({added} new, {retired} retired)")
    lines.append(
        f"model v{plan['from_version']} → v{plan['to_version']}: saved, its {plan['checkpoints']} start checkpoints "
        f"migrated from v{plan['from_version']}'s latest, then activated; the job restarts at a batch boundary"
    )
    lines.append("then the scaling window is verified (no loss, no duplicates, per-key order, routing)")
    return lines


def run_conf(request: Any) -> dict[str, Any]:
    """The ``elastic_rescale`` conf for a checked request: the same shape a REST trigger sends."""
    return {"job": request.job, "factor": request.factor, "reason": request.reason, "dry_run": False}


# --- page -------------------------------------------------------------------------------------------------------------

CSS = """
form.rescale { display: flex; flex-wrap: wrap; align-items: center; gap: 10px; margin-top: 4px; }
form.rescale input[type=number] { width: 90px; } form.rescale input[type=text] { width: 320px; }
form.rescale button, form.confirm button { padding: 4px 12px; border-radius: 6px; border: 1px solid #1d4f91;
       background: #1d4f91; color: #fff; cursor: pointer; }
form.rescale button.preview { background: #fff; color: #1d4f91; }
ul.sample { margin: 4px 0 6px 16px; padding: 0; } ul.changes li { margin: 3px 0; }
.refusal { background: #ffe3e3; color: #8a1c1c; border-radius: 6px; padding: 10px 14px; }
"""


def rescale_form(
    job: Mapping[str, Any],
    *,
    action: str = "rescale/preview",
    title: str = "Rescale",
    factor: object = None,
    reason: str = DEFAULT_REASON,
) -> str:
    """The card's form: the current factor, a number field with the allowed range, a reason, "Preview".

    ``factor`` pre-fills the field (default: the current factor); ``reason`` the reason.
    """
    from pipelines.core.hashing import MAX_FACTOR_ENV, max_factor

    model = job.get("model")
    if not model:
        return ""
    limit = _max_factor_or_none(max_factor)
    bound = f" max='{limit}'" if limit is not None else ""
    name = job["job"]
    value = model["factor"] if factor in (None, "") else factor
    return (
        f"<h3>{_e(title)}</h3><form class='rescale' method='get' action='{_e(action)}' data-job='{_e(name)}'>"
        f"<input type='hidden' name='job' value='{_e(name)}'>"
        f"<span>current factor <b class='current-factor'>{_e(model['factor'])}</b></span>"
        f"<label>new factor <input type='number' name='factor' min='1'{bound} step='1' required "
        f"value='{_e(value)}'></label>"
        f"<label>reason <input type='text' name='reason' maxlength='500' required value='{_e(reason)}'></label>"
        "<button type='submit' class='preview'>Preview</button>"
        f"<span class='muted'>1 to {_e(limit if limit is not None else '?')} ({MAX_FACTOR_ENV}); "
        "nothing changes until you trigger the run from the preview</span></form>"
    )


def render_preview(
    job: str, factor: str, reason: str, result: Mapping[str, Any] | None, error: str | None, dag: Mapping[str, Any]
) -> str:
    """The preview page: the planned model next to the current one, and the button that triggers the run."""
    from pipelines_airflow.page import BASE_CSS, TITLE

    title = f"Rescale {job or '?'}: preview"
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)} · {TITLE}</title>"
        f"<style>{BASE_CSS}{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1><div class='sub'><a href='../'>← {TITLE}</a> · a dry run: nothing was written, "
        "no lock was taken</div><section class='job preview' data-job='" + _e(job) + "'>",
    ]
    if error is not None:
        parts.append(f"<p class='refusal'>{_e(error)}</p>")
    if result is not None:
        plan, current = result["plan"], result["current"]
        rows = [
            ("model version", f"v{current['version']}", f"v{plan['to_version']}", "version"),
            ("elasticity factor", current["factor"], plan["to_factor"], "factor"),
            ("virtual tasks", current["virtual_tasks"], plan["virtual_tasks"], "virtual-tasks"),
            ("grouper", current["grouper"], plan["grouper"], "grouper"),
            ("partitions", _partitions(current["partitions"]), _partitions(plan["partitions"]), "partitions"),
            ("start checkpoints", "–", plan["checkpoints"], "checkpoints"),
        ]
        body = "".join(
            f"<tr class='{cls}'><th>{_e(label)}</th><td class='now'>{_e(now)}</td>"
            f"<td class='planned'>{_e(planned)}</td></tr>"
            for label, now, planned, cls in rows
        )
        parts.append(f"<table class='plan'><thead><tr><th></th><th>now</th><th>planned</th></tr></thead>{body}</table>")
        parts.append("<h3>What the run changes</h3><ul class='changes'>")
        parts += [f"<li>{_e(line)}</li>" for line in result["changes"]]
        parts.append("</ul>")
        for key, label in (("tasks_added", "new virtual tasks"), ("tasks_retired", "retired virtual tasks")):
            tasks = result[key]
            if tasks["count"]:
                hidden = tasks["count"] - len(tasks["names"])
                more = f" … and {hidden} more" if hidden > 0 else ""
                parts.append(
                    f"<details class='{key}'><summary>{tasks['count']} {label}</summary>"
                    f"<div class='mono'>{_e(', '.join(tasks['names']))}{_e(more)}</div></details>"
                )
        if result.get("lock"):
            parts.append(
                f"<p><span class='pill warn'>scaling lock held</span> {_e(result['lock'])}: the run waits "
                "<code>lock_wait_s</code> (0 s by default), then fails; trigger it once the lock is free</p>"
            )
        if dag.get("paused"):
            parts.append(
                f"<p><span class='pill warn'>{RESCALE_DAG} is paused</span> the run will be queued and starts "
                "once the DAG is unpaused in Airflow</p>"
            )
        if dag.get("error"):
            parts.append(f"<p class='muted'>Airflow: {_e(dag['error'])}</p>")
        if plan["changes"]:
            conf = result["conf"]
            parts.append(
                f"<form class='confirm' method='post' action='../rescale' target='_top'>"
                f"<input type='hidden' name='job' value='{_e(conf['job'])}'>"
                f"<input type='hidden' name='factor' value='{_e(conf['factor'])}'>"
                f"<input type='hidden' name='reason' value='{_e(conf['reason'])}'>"
                f"<button type='submit' class='trigger'>Trigger {RESCALE_DAG}: {_e(conf['job'])} to factor "
                f"{_e(conf['factor'])}</button> <span class='muted'>conf {_e(json.dumps(conf))}</span></form>"
            )
    if result is not None:  # another factor, the operator's reason kept
        current = {"job": job, "model": {"factor": result["current"]["factor"]}}
        kept = reason or DEFAULT_REASON
        parts.append(rescale_form(current, action="preview", title="Another factor", factor=factor, reason=kept))
    elif job:
        parts.append(f"<p><a href='../#job-{_e(job)}'>← back to {_e(job)}</a></p>")
    parts.append("</section></body></html>")
    return "".join(parts)


def render_refusal(message: str, status: int, back: str = "../") -> str:
    from pipelines_airflow.page import BASE_CSS, TITLE

    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Rescale refused · {TITLE}</title>"
        f"<style>{BASE_CSS}{CSS}</style></head><body><h1>Rescale refused ({status})</h1>"
        f"<p class='refusal'>{_e(message)}</p><p><a href='{_e(back)}'>← {TITLE}</a></p></body></html>"
    )


def _partitions(partitions: Mapping[str, Any]) -> str:
    return ", ".join(f"{s}: {n}" for s, n in sorted(partitions.items())) or "–"


def _max_factor_or_none(read: Any) -> int | None:
    try:
        return int(read())
    except Exception:  # a bad PIPELINES_MAX_FACTOR: the form still renders, the server refuses with the reason
        return None


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# --- Airflow: the run, and the routes --------------------------------------------------------------------------------


class RunRefused(Exception):
    """Airflow would not create the run (DAG missing, import errors, conf rejected by its Params)."""


def dag_state(dag_id: str = RESCALE_DAG) -> dict[str, Any]:
    """Whether the DAG is registered and paused, from Airflow's database (the api-server has it)."""
    try:
        from airflow.models import DagModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            dm = session.scalar(select(DagModel).where(~DagModel.is_stale, DagModel.dag_id == dag_id).limit(1))
            if dm is None:
                return {"registered": False, "paused": None, "error": f"DAG {dag_id} is not registered"}
            return {"registered": True, "paused": bool(dm.is_paused), "error": None}
    except Exception as e:  # the preview does not depend on Airflow's database
        return {"registered": None, "paused": None, "error": f"{type(e).__name__}: {e}"}


def trigger_run(dag_id: str, conf: Mapping[str, Any], user_name: str) -> dict[str, Any]:
    """A manual run of ``dag_id`` with ``conf``, made as Airflow 3.3's public trigger route makes one.

    Same checks (registered, no import errors, manual runs allowed), same conf
    validation against the DAG's Params (``TriggerDAGRunPostBody.validate_context``),
    same ``create_dagrun`` call, triggered by the UI in the user's name.
    """
    from airflow.api_fastapi.common.dagbag import get_latest_version_of_dag
    from airflow.api_fastapi.core_api.datamodels.dag_run import TriggerDAGRunPostBody
    from airflow.exceptions import ParamValidationError
    from airflow.models import DagModel
    from airflow.models.dagbag import DBDagBag
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType
    from sqlalchemy import select

    with create_session() as session:
        dm = session.scalar(select(DagModel).where(~DagModel.is_stale, DagModel.dag_id == dag_id).limit(1))
        if dm is None:
            raise RunRefused(f"DAG {dag_id} is not registered in Airflow: is dags/{dag_id}.py in the DAG folder?")
        if dm.has_import_errors:
            raise RunRefused(f"DAG {dag_id} has import errors and cannot be triggered: see Airflow's import errors")
        allowed = getattr(dm, "allowed_run_types", None)
        if allowed is not None and DagRunType.MANUAL not in allowed:
            raise RunRefused(f"DAG {dag_id} does not allow manual runs")
        paused = bool(dm.is_paused)
        dag = get_latest_version_of_dag(DBDagBag(), dag_id, session)
        try:
            params = TriggerDAGRunPostBody(logical_date=None, conf=dict(conf)).validate_context(dag)
            run = dag.create_dagrun(
                run_id=params["run_id"],
                logical_date=params["logical_date"],
                data_interval=params["data_interval"],
                run_after=params["run_after"],
                conf=params["conf"],
                run_type=DagRunType.MANUAL,
                triggered_by=DagRunTriggeredByType.UI,
                triggering_user_name=user_name,
                state=DagRunState.QUEUED,
                partition_key=params.get("partition_key"),
                partition_date=params.get("partition_date"),
                session=session,
            )
        except (ParamValidationError, ValueError) as e:
            raise RunRefused(f"Airflow refused the run's conf: {e}") from e
        return {"dag_id": dag_id, "run_id": run.run_id, "paused": paused, "conf": dict(params["conf"] or {})}


def add_routes(app: Any) -> None:
    """The preview (HTML and JSON) and the trigger; the app's dependency already requires DAG read access."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import get_user, requires_access_dag
    from fastapi import Depends, Form, Query, Request
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

    from pipelines.control.home import resolve_home
    from pipelines.errors import PipelinesError
    from pipelines_airflow.datadocs import run_url

    def wants_json(request: Request) -> bool:
        accept = request.headers.get("accept", "")
        return "application/json" in accept and "text/html" not in accept

    def refused(request: Request, message: str, status: int, back: str) -> Any:
        if wants_json(request):
            return JSONResponse({"detail": message}, status_code=status)
        return HTMLResponse(render_refusal(message, status, back), status_code=status)

    def compute(job: str, factor: str, reason: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            return preview(resolve_home(), job, factor, reason), None
        except PipelinesError as e:  # bad input or a refused plan: the platform's message, not a 500
            return None, str(e)

    @app.get(PREVIEW_ROUTE, response_class=HTMLResponse)
    def preview_page(
        job: str = Query(default=""), factor: str = Query(default=""), reason: str = Query(default=DEFAULT_REASON)
    ) -> HTMLResponse:
        result, error = compute(job, factor, reason)
        page = render_preview(job, factor, reason, result, error, dag_state() if result else {})
        return HTMLResponse(page, status_code=400 if error else 200, headers={"Cache-Control": "no-store"})

    @app.get(PREVIEW_API_ROUTE)
    def preview_json(
        job: str = Query(default=""), factor: str = Query(default=""), reason: str = Query(default=DEFAULT_REASON)
    ) -> JSONResponse:
        result, error = compute(job, factor, reason)
        if error is not None:
            return JSONResponse({"detail": error}, status_code=400)
        from pipelines_airflow.page import plain as _plain

        return JSONResponse(_plain({**result, "dag": dag_state()}), headers={"Cache-Control": "no-store"})

    @app.post(
        FORM_ROUTE,
        dependencies=[Depends(requires_access_dag("POST", DagAccessEntity.RUN, param_dag_id=RESCALE_DAG))],
    )
    def trigger(
        request: Request,
        user: Annotated[Any, Depends(get_user)],
        job: str = Form(default=""),
        factor: str = Form(default=""),
        reason: str = Form(default=DEFAULT_REASON),
    ) -> Any:
        back = "./?" + urlencode({"job": job}) if job else "./"
        if not same_origin(request.headers.get("origin"), request.headers.get("host")):
            return refused(request, "refused: the form was posted from another site", 403, back)
        try:
            checked = rescale_request(resolve_home(), job, factor, reason)
            run = trigger_run(RESCALE_DAG, run_conf(checked), user.get_name())
        except (PipelinesError, RunRefused) as e:
            return refused(request, str(e), 400, back)
        url = run_url(run["dag_id"], run["run_id"])
        if wants_json(request):
            return JSONResponse({**run, "url": url}, status_code=201)
        return RedirectResponse(url, status_code=303)


def same_origin(origin: str | None, host: str | None) -> bool:
    """No ``Origin`` (not a browser's cross-site post) or one naming this server's host."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    return urlparse(origin).netloc.lower() == host.lower()
