"""How every page of the plugin is drawn: Jinja2 templates with autoescape, and JSON-able values.

The templates are in ``templates/`` beside this module; they build on the
operator's view's own (``pipelines/observe/templates``: the plots, the
per-task table, the inputs), through the one environment of
``pipelines.observe.html``, so every value reaches the markup through the
same autoescape. Nothing in the pages needs JavaScript to be read; the one
script (``templates/embed.js``) only helps inside Airflow's frame (see it).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TITLE = "Elastic pipelines"
TEMPLATES = Path(__file__).with_name("templates")
REFRESH_S = 30


BAD_STATUSES = {"failed", "dq failed", "error"}
UNDONE_STATUSES = {"rolled back"}


def render(template: str, **context: Any) -> str:
    """A page of the plugin; ``context`` is plain data (``collect``'s dictionaries and the like)."""
    from pipelines.core.limits import MAX_REASON
    from pipelines.observe.html import environment
    from pipelines.observe.render import view
    from pipelines_airflow.datadocs import describe_offender, docs_url

    env = environment(TEMPLATES)
    env.globals.update(TITLE=TITLE, REFRESH_S=REFRESH_S, MAX_REASON=MAX_REASON, observe_view=view)
    env.globals.update(status_class=status_class)
    env.filters.update(docs_url=docs_url, offender=describe_offender, partitions=partitions)
    return env.get_template(template).render(**context)


def docs_chrome(up: str, static: str, summary: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """What a Data Docs page served by the plugin gains: its head's additions, and the bar back to the page with
    what the page checked (``datadocs.page_summary``), when the control plane names the page."""
    return render("docs_head.html", static=static), render("docs_bar.html", up=up, summary=summary)


def status_class(event: Mapping[str, Any]) -> str:
    """A scaling event's pill: red for a failure, amber for a rollback, blue while in progress, green once done."""
    if event["status"] in BAD_STATUSES:
        return "bad"
    if event["status"] in UNDONE_STATUSES:
        return "warn"
    return "info" if event.get("finished_at") is None else "ok"


def partitions(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{s}: {n}" for s, n in sorted(counts.items())) or "–"


def plain(value: Any) -> Any:
    """JSON-able: datetimes as ISO text, numpy scalars as Python numbers, NaN as None."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [plain(v) for v in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if hasattr(value, "isoformat") and callable(value.isoformat):  # pandas Timestamp
        return value.isoformat()
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
