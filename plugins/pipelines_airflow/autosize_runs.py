"""What became of an autosize decision: the ``elastic_rescale`` run it triggered, and how that run ended.

``scale_evaluation`` names each run it triggers after its decision (job and
decision time, ``run_id``), so the page can find the run from the decision's
row alone: applied (the run succeeded and changed the model), skipped (its
note says why: another operation went first and the autosizer, asked again,
held), failed (its note says what failed), or still running.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

PREFIX = "autosize__"
APPLIED, SKIPPED, FAILED = "applied", "skipped", "failed"


def run_id(job: str, decided_at: dt.datetime) -> str:
    """The id of the ``elastic_rescale`` run a decision of ``job`` made at ``decided_at`` triggers.

    Within Airflow's run id pattern (``[A-Za-z0-9_.~:+-]``: job names are
    letters, digits, ``.``, ``_`` and ``-``); microseconds keep two decisions
    of one second apart.
    """
    at = decided_at.astimezone(dt.UTC) if decided_at.tzinfo else decided_at.replace(tzinfo=dt.UTC)
    return f"{PREFIX}{job}__{at:%Y-%m-%dT%H:%M:%S.%f}"


def outcome(state: str | None, note: str | None) -> dict[str, Any]:
    """How the page words a run's end: ``{"outcome", "why"}`` from its state and note."""
    if state is None:
        return {"outcome": "not triggered", "why": None}
    if state == "success":
        if note and note.startswith("Skipped"):
            return {"outcome": SKIPPED, "why": note}
        return {"outcome": APPLIED, "why": None}
    if state == "failed":
        return {"outcome": FAILED, "why": note}
    return {"outcome": state, "why": None}


def runs(ids: Iterable[str]) -> dict[str, tuple[str, str | None]]:
    """``run_id -> (state, note)`` of the ``elastic_rescale`` runs with those ids, from Airflow's database."""
    wanted = list(ids)
    if not wanted:
        return {}
    from airflow.models import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:  # the note is a relation of the run: read it while the session is open
        found = session.scalars(
            select(DagRun).where(DagRun.dag_id == "elastic_rescale", DagRun.run_id.in_(wanted))
        ).all()
        return {r.run_id: (getattr(r.state, "value", str(r.state)), r.note) for r in found}
