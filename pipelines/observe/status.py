"""``pipelines status JOB``: the operator's view in a terminal, once or refreshing, and as a report file.

* one shot: the text view (``render.text``), or with ``--json`` the same data
  as the Airflow page's API (``observe`` of a job);
* ``--watch [SECONDS]``: redraws every SECONDS (default 5) until Ctrl-C, which
  ends it with exit code 0; the control-plane handles are kept between
  refreshes, so each refresh replays only the tables' new commits. With
  ``--json`` it prints one JSON document per line per refresh (NDJSON);
* ``--export FILE.html``: a self-contained report (inline SVG and CSS, nothing
  fetched); ``FILE.png``: that report rendered by a headless Chromium through
  the ``playwright`` package when both are installed (the test tooling puts
  them there), refused with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from pipelines.control import ControlPlane
from pipelines.core.limits import MAX_WATCH_S, shown
from pipelines.errors import ConfigError
from pipelines.observe.collect import DEFAULT_MINUTES, check_minutes, observe
from pipelines.observe.render import export_page, text
from pipelines.storage.home import Home

DEFAULT_WATCH_S = 5.0
CLEAR = "\x1b[H\x1b[2J"
CHROMIUM_ENV = "PIPELINES_CHROMIUM"
"""A Chromium (or Chrome) binary for PNG exports; default: ``chromium`` or ``chromium-browser`` on PATH."""


class Output(Protocol):
    as_json: bool
    out: TextIO
    err: TextIO

    def emit(self, data: Any, human: Any) -> None: ...

    def note(self, message: str) -> None: ...


def status(
    home: Home,
    job: str,
    output: Output,
    *,
    minutes: float = DEFAULT_MINUTES,
    watch: float | None = None,
    export: str | None = None,
    iterations: int | None = None,
) -> None:
    """Show (or watch, or export) one job's observation; an unknown job raises ``UnknownJobError`` first."""
    if watch is not None and export is not None:
        raise ConfigError("--watch and --export do not go together: export once, or watch the terminal")
    if watch is not None and not 0 < watch <= MAX_WATCH_S:  # nan too; time.sleep(1e300) overflows
        raise ConfigError(
            f"--watch needs a refresh period > 0 and at most {MAX_WATCH_S:,g} seconds (a day), got {shown(watch)}"
        )
    check_minutes(minutes)
    control = ControlPlane(home)
    data = observe(home, job, control=control, minutes=minutes)
    if export is not None:
        path = write_export(data, export)
        output.note(f"wrote {path}")
    if watch is None:
        output.emit(data, lambda: text(data))
        return
    _watch(home, job, output, control, data, minutes, watch, iterations)


def _watch(
    home: Home,
    job: str,
    output: Output,
    control: ControlPlane,
    data: dict[str, Any],
    minutes: float,
    period: float,
    iterations: int | None,
) -> None:
    tty = output.out.isatty() if hasattr(output.out, "isatty") else False
    shown = 0
    try:
        while True:
            if output.as_json:
                output.out.write(json.dumps(data, default=str) + "\n")
            else:
                head = f"pipelines status {job} · every {period:g} s · Ctrl-C to stop\n\n"
                output.out.write((CLEAR if tty else "\n") + head + text(data) + "\n")
            output.out.flush()
            shown += 1
            if iterations is not None and shown >= iterations:
                return
            time.sleep(period)
            data = observe(home, job, control=control, minutes=minutes)
    except KeyboardInterrupt:
        output.note(f"stopped watching {job}")


def write_export(data: dict[str, Any], target: str) -> Path:
    """The report as ``.html`` (self-contained) or ``.png`` (rendered by a headless Chromium)."""
    path = Path(target)
    suffix = path.suffix.lower()
    if suffix not in (".html", ".htm", ".png"):
        raise ConfigError(f"--export writes .html or .png files, got {target!r}")
    if not path.resolve().parent.is_dir():  # Chromium would make the missing folders for a .png
        raise ConfigError(f"--export {target!r}: the folder {str(path.resolve().parent)!r} does not exist")
    page = export_page(data)
    if suffix != ".png":
        path.write_text(page, encoding="utf-8")
        return path
    browser = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")
    missing = None if browser is not None else f"a Chromium (set {CHROMIUM_ENV})"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "the playwright package"
    if missing is not None:
        raise ConfigError(f"a PNG export needs {missing}; export to .html instead (it has the same plots)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=browser, args=["--headless", "--no-sandbox"])
        try:
            tab = chromium.new_page(viewport={"width": 1240, "height": 900})
            tab.set_content(page)
            tab.screenshot(path=str(path), full_page=True)
        finally:
            chromium.close()
    return path
