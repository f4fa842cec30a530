"""The rescale form's logic: check a request, preview its plan in the operator's words, create the run.

No web framework here (the routes are in ``app``), and no Airflow until a
run is made:

* ``preview``: the dry run. The same planning as ``elastic_rescale``'s
  ``plan`` task (``scaling.validate``, then ``planning.plan_next``); nothing
  is written and no lock is taken. It names what the change is (a split, a
  merge, or a change that replays records, with about how many), whether a
  running driver will switch in place or the new model gets a catch-up run,
  and, for the factor in force, that nothing is planned.
* ``trigger_run``: a manual run of ``elastic_rescale``, made as Airflow's own
  ``POST /api/v2/dags/{dag_id}/dagRuns`` makes one (same checks, same conf
  validation against the DAG's Params).
* ``run_state``: where a run stands, for the confirmation page.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd
from typing import Any
from urllib.parse import urlparse

RESCALE_DAG = "elastic_rescale"
DEFAULT_REASON = "manual rescale from the Elastic pipelines page"
TASKS_NAMED = 16  # task names listed per side of a change; the counts are always complete


def parse_factor(raw: object) -> int:
    """The factor a form sent, or the ConfigError that says what is allowed."""
    from pipelines.core.hashing import MAX_FACTOR_ENV, max_factor, validate_factor
    from pipelines.errors import ConfigError

    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise ConfigError(f"give an elasticity factor: a whole number from 1 to {max_factor()} ({MAX_FACTOR_ENV})")
    return validate_factor(raw.strip() if isinstance(raw, str) else raw)


def rescale_request(home: Any, job: str, factor: object, reason: str | None = None) -> Any:
    """The request the form stands for, checked as ``elastic_rescale``'s ``validate`` task checks it."""
    from pipelines.core.limits import check_reason
    from pipelines.errors import ConfigError
    from pipelines.operations import scaling

    if not isinstance(job, str) or not job.strip():
        raise ConfigError("name the job to rescale")
    said = check_reason(reason) if reason else DEFAULT_REASON  # as typed: 200,000 spaces are no short reason
    request = scaling.ScalingRequest(job.strip(), parse_factor(factor), said)
    scaling.validate(home, request)  # reason, factor, known job (UnknownJobError names the known ones)
    return request


def preview(home: Any, job: str, factor: object, reason: str | None = None) -> dict[str, Any]:
    """The plan ``elastic_rescale`` would make now, how it differs from the model in force, and how it switches."""
    from pipelines import planning
    from pipelines.control import ControlPlane
    from pipelines.control.locks import ScalingLock
    from pipelines.core.hashing import max_factor
    from pipelines.operations.scaling.readings import last_heartbeat

    request = rescale_request(home, job, factor, reason)
    version = planning.plan_next(
        home, request.job, factor=request.factor, grouper=request.grouper, config=request.config
    )
    plan = version.summary()
    plan.update(kind=request.kind, reason=request.reason)  # what scaling.plan returns to the DAG
    current = version.previous
    assert current is not None  # plan_next always plans from the active model
    old = [str(t.task_name) for t in current.tasks()]
    new = [str(t.task_name) for t in version.model.tasks()]
    added = [t for t in new if t not in set(old)]
    retired = [t for t in old if t not in set(new)]
    lock = ScalingLock(home).state(request.job)
    control = ControlPlane(home)
    beat = last_heartbeat(control, request.job)
    drivers = control.drivers.latest(request.job)
    change = describe_change(
        current.elasticity_factor,
        version.model.elasticity_factor,
        replay=planning.replay_estimate(home, version) if plan["changes"] else 0,
        partitions=({str(s): n for s, n in current.partitions().items()}, plan["partitions"]),
        groupers=(current.grouper, plan["grouper"]),
    )
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
        "change": change,
        "switch": describe_switch(beat, drivers[0] if drivers else None, plan["changes"]),
        "tasks_added": {"count": len(added), "names": added[:TASKS_NAMED]},
        "tasks_retired": {"count": len(retired), "names": retired[:TASKS_NAMED]},
        "lock": lock.describe() if lock is not None and lock.held else None,
        "max_factor": max_factor(),
        "conf": run_conf(request),
        "state": state_reads(home, version, current.elasticity_factor, version.model.elasticity_factor),
    }


def state_reads(home: Any, version: Any, old: int, new: int) -> list[dict[str, Any]]:
    """Per keyed state of the job: its size, and what each new task of the switch reads of it and from where."""
    from pipelines.core.state import switch_reads
    from pipelines.jobs.config import job_config
    from pipelines.state.durable import StateTables

    out = []
    for spec in job_config(version.model).state:
        _, size = StateTables(home, version.model.job_name, spec).size()
        where, each = switch_reads(old, new, size)
        out.append({"state": spec.name, "bytes": size, "per_task_bytes": each, "from": where})
    return out


def describe_change(
    old: int,
    new: int,
    *,
    replay: int | None,
    partitions: tuple[Mapping[str, int], Mapping[str, int]] = ({}, {}),
    groupers: tuple[str, str] = ("", ""),
) -> dict[str, Any]:
    """What kind of change ``old`` → ``new`` is for the keys, in the operator's words.

    A key in bucket ``h mod X`` moves to ``h mod X'``; a new bucket starts at
    the slowest old bucket that held any of its keys (those congruent modulo
    ``gcd(X, X')``, ``pipelines.core.checkpoints``). So a split (X divides
    X') inherits each bucket's own position and reads nothing twice; a merge
    (X' divides X) and any other change start a bucket at the slowest of
    several, and records the faster ones had processed are read again:
    ``replay`` is about how many (None: an input cannot count them).
    """
    lines: list[str] = []
    if old == new:
        kind = "none"
    elif new % old == 0:
        kind = "split"
        lines.append(
            f"a split: each key bucket of factor {old} splits into {new // old} of factor {new}; every new bucket "
            "starts where its parent bucket stands, so no record is read twice and keys keep their order"
        )
    elif old % new == 0:
        kind = "merge"
        lines.append(
            f"a merge: every {old // new} key buckets of factor {old} merge into one of factor {new}, which "
            f"starts at the slowest of them; records the faster ones had processed are read again: "
            f"{_replayed(replay)}"
        )
    else:
        g = gcd(old, new)
        kind = "replay"
        lines.append(
            f"neither a split nor a merge ({old} and {new} share {'no factor' if g == 1 else f'the factor {g}'}): "
            f"each new key bucket takes keys from {old // g} old buckets of its partition and starts at the "
            f"slowest of them; records the others had processed are read again: {_replayed(replay)}"
        )
    before, after = partitions
    grown = {s: (before.get(s), n) for s, n in after.items() if before.get(s) != n}
    for stream, (was, now) in sorted(grown.items()):
        lines.append(f"input {stream}: {was if was is not None else 'new'} → {now} partitions")
    if groupers[0] != groupers[1]:
        lines.append(f"grouper {groupers[0]} → {groupers[1]}")
    if kind == "none" and not grown and groupers[0] == groupers[1]:
        lines.append(f"nothing: factor {new} is the factor in force; no model would be planned and no run is needed")
    return {"kind": kind, "from_factor": old, "to_factor": new, "replay": replay, "lines": lines}


def _replayed(replay: int | None) -> str:
    if replay is None:
        return "an unknown number (an input cannot count records between two positions)"
    if replay == 0:
        return "none now (the buckets of each partition stand together)"
    return f"about {replay:,} records"


def describe_switch(beat: Mapping[str, Any] | None, newest: Any, changes: bool) -> dict[str, Any]:
    """How the job would move to the new model: a live driver switches in place, else a catch-up run."""
    if not changes:
        return {"mode": None, "line": "no switch: nothing changes"}
    if beat is not None and beat.get("live"):
        where = f" on {newest.host} (pid {newest.pid})" if newest is not None else ""
        return {
            "mode": "in-place",
            "line": (
                f"a driver is running{where}, heartbeat {beat['age_s']:.0f} s ago: it stops its query at a batch "
                "boundary and starts the new model in the same Spark application (in place); the downtime is "
                "measured and recorded"
            ),
        }
    return {
        "mode": "catch-up",
        "line": (
            "no driver is running: the job stays stopped while the model changes, then the new model gets a "
            "catch-up run (spark-submit, available-now) that reads up to the inputs' ends before it is verified "
            "(no run if the job had already read them to their ends)"
        ),
    }


def run_conf(request: Any) -> dict[str, Any]:
    """The ``elastic_rescale`` conf for a checked request: the same shape a REST trigger sends."""
    return {"job": request.job, "factor": request.factor, "reason": request.reason, "dry_run": False}


# --- Airflow: the run ---------------------------------------------------------------------------------------------


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


def run_state(dag_id: str, run_id: str) -> dict[str, Any] | None:
    """A run's state, note and tasks (in the DAG's order, with their durations) from Airflow's database, and, once
    it has one, the scaling event it ran (``result``); None when there is no such run."""
    from airflow.models import DagRun, TaskInstance
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id).limit(1))
        if run is None:
            return None
        tasks = session.execute(
            select(
                TaskInstance.task_id,
                TaskInstance.state,
                TaskInstance.map_index,
                TaskInstance.start_date,
                TaskInstance.end_date,
            ).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ).all()
        dag = SerializedDagModel.get_dag(dag_id, session=session)
        order = {task_id: i for i, task_id in enumerate(dag.task_ids)} if dag is not None else {}
        state = getattr(run.state, "value", str(run.state))
        return {
            "dag_id": dag_id,
            "run_id": run_id,
            "state": state,
            "note": run.note,
            "conf": dict(run.conf or {}),
            "finished": state in ("success", "failed"),
            "tasks": [
                {
                    "task": t.task_id + (f"[{t.map_index}]" if t.map_index >= 0 else ""),
                    "state": getattr(t.state, "value", str(t.state or "none")),
                    "duration_s": (t.end_date - t.start_date).total_seconds() if t.start_date and t.end_date else None,
                }
                for t in sorted(tasks, key=lambda t: (order.get(t.task_id, len(order)), t.task_id, t.map_index))
            ],
            "result": run_result(dag_id, run_id, (run.conf or {}).get("job")),
        }


def run_result(dag_id: str, run_id: str, job: object) -> dict[str, Any] | None:
    """The scaling event the run opened (its owner is the run), as the page words its end; None before it has one."""
    from pipelines.control import ControlPlane
    from pipelines.storage.home import resolve_home

    if not isinstance(job, str):
        return None
    owner = f"airflow:{dag_id}:{run_id}"
    try:
        mine = [e for e in ControlPlane(resolve_home()).events.history(job) if e.details.get("owner") == owner]
    except Exception:  # an unknown job, or a home that cannot be read from here: the run's state still says how
        return None
    if not mine:
        return None
    event = mine[-1]
    return {
        "status": str(event.status),
        "from_factor": event.from_factor,
        "to_factor": event.to_factor,
        "to_version": event.to_version,
        "downtime_s": event.details.get("downtime_s"),
        "records_replayed": event.details.get("records_replayed"),
        "mode": event.details.get("mode"),
        "dq": event.details.get("dq"),
        "finished_at": event.finished_at,
    }


def same_origin(origin: str | None, host: str | None) -> bool:
    """No ``Origin`` (not a browser's cross-site post) or one naming this server's host."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    try:
        netloc = urlparse(origin).netloc
    except ValueError:  # "http://[::1" and the like: no site this server is
        return False
    return netloc.lower() == host.lower()
