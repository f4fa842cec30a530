"""The page's operator view of a job: plots over time, virtual tasks, inputs (``pipelines.observe``).

Two hooks for ``ui.py``: ``section`` reads one job's observation (the JSON
API's ``observe`` key) and ``html`` draws it in the job's card. The window is
the last ``MINUTES`` minutes of metrics: the page reads only those.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MINUTES = 60.0


def section(control: Any, home: Any, job: str) -> dict[str, Any]:
    from pipelines.observe.collect import observe

    return observe(home, job, control=control, minutes=MINUTES)


def html(observation: Mapping[str, Any] | None) -> str:
    from pipelines.observe.render import html_section

    return html_section(observation)
