"""What every page of the plugin shares: its title, its base style, and JSON-able values.

Its own module so the job page (``ui``) and the rescale pages (``forms``)
both build on it without importing each other.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

TITLE = "Elastic pipelines"

BASE_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0; padding: 16px 24px;
       color: #1f2933; background: #f7f9fb; font-size: 14px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 0; } h3 { font-size: 14px; margin: 16px 0 6px; }
.sub { color: #616e7c; margin-bottom: 16px; } .sub code { background: #e4e7eb; padding: 1px 4px; border-radius: 3px; }
.job { background: #fff; border: 1px solid #d9e2ec; border-radius: 8px; padding: 14px 18px; margin-bottom: 18px;
       box-shadow: 0 1px 2px rgba(0,0,0,.04); }
.head { display: flex; align-items: baseline; gap: 12px; flex-wrap: wrap; }
.facts { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 10px; }
.fact { border: 1px solid #e4e7eb; border-radius: 6px; padding: 6px 10px; min-width: 90px; }
.fact .k { color: #7b8794; font-size: 11px; text-transform: uppercase; letter-spacing: .04em; }
.fact .v { font-size: 16px; font-weight: 600; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eef2f6; vertical-align: top; }
th { color: #52606d; font-weight: 600; background: #f5f7fa; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.ok { background: #e3f9e5; color: #0e5814; } .bad { background: #ffe3e3; color: #8a1c1c; }
.warn { background: #fff3c4; color: #7c5e10; } .info { background: #e6f0ff; color: #1d4f91; }
.muted { color: #9aa5b1; } .err { color: #8a1c1c; font-family: monospace; font-size: 12px; white-space: pre-wrap; }
details summary { cursor: pointer; color: #52606d; } .mono { font-family: monospace; font-size: 12px; }
"""


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
