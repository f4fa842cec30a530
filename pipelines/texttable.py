"""The one plain-text table of the platform's human output: the CLI's listings, the demo's steps, the job view.

Columns are left-aligned and as wide as their widest cell, two spaces apart,
with no trailing spaces; every cell is shown with ``str``. Scripts read the
``--json`` output instead, so the layout may change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """``headers`` over ``rows``, one line each."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)
