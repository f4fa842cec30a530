"""HTML from templates: the one Jinja2 environment of the operator's views, with autoescape on.

Every page and fragment of HTML (and inline SVG) is a template under
``templates/``: the CLI's export here, the Airflow page's in the plugin,
which adds its own folder (``environment(extra)``). Values reach the markup
only through Jinja2's autoescape, so there is one escaping path, not a
helper per module. Filters format values the same way everywhere.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2

from pipelines.core.segments import retention_text
from pipelines.observe.svg import compact

TEMPLATES = Path(__file__).with_name("templates")


def short_time(value: Any) -> str:
    """ISO text or epoch seconds as ``YYYY-MM-DD HH:MM:SS`` (UTC), ``–`` for nothing."""
    if value is None or value == "":
        return "–"
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%d %H:%M:%S")
    return str(value).replace("T", " ")[:19]


def seconds(value: Any) -> str:
    return "–" if value is None else f"{float(value):.1f} s"


def dash(value: Any) -> str:
    return "–" if value is None or value == "" else str(value)


def number(value: Any, unit: str = "") -> str:
    return "–" if value is None else compact(float(value)) + unit


def minutes(value: Any) -> str:
    if value is None:
        return "?"
    m = float(value)
    return f"{m:g} min" if m < 120 else f"{m / 60:g} h"


def cell(value: Any) -> str:
    """A table cell's text for any JSON value: times shortened, floats compact, structures as JSON."""
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        return short_time(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping | list):
        return json.dumps(value, default=str)
    return dash(value)


def verdict_class(value: Any) -> str:
    """The pill colour of a data-quality verdict: a mapping with ok/success, or a word such as PASS or FAIL."""
    if isinstance(value, Mapping):
        ok = value.get("ok", value.get("success"))
        return "ok" if ok is True else "bad" if ok is False else "info"
    upper = str(value).upper()
    return "ok" if upper in ("PASS", "OK", "TRUE", "SUCCESS") else "bad" if upper in ("FAIL", "FALSE") else "info"


def to_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


FILTERS = {
    "short_time": short_time,
    "seconds": seconds,
    "dash": dash,
    "number": number,
    "minutes": minutes,
    "cell": cell,
    "verdict_class": verdict_class,
    "to_text": to_text,
    "retention": retention_text,  # a stream's own (stream alter --retention), as describe shows it
    "tojson_text": lambda v: json.dumps(v, sort_keys=True, default=str),
}


@functools.cache
def environment(*extra: Path) -> jinja2.Environment:
    """Templates of ``extra`` folders first, then this package's; autoescape for every template."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*(str(p) for p in extra), str(TEMPLATES)]),
        autoescape=True,
        undefined=jinja2.Undefined,  # an optional field missing from a JSON observation reads as empty
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(FILTERS)
    return env


def render(template: str, *, extra: tuple[Path, ...] = (), **context: Any) -> str:
    return environment(*extra).get_template(template).render(**context)
