"""The terminal of a run shows the platform's lines; Spark's own go to the home's log file unless --verbose."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.runtime.logs import announce, log_path, quiet, until_done
from pipelines.storage.home import Home

from .jobs import job, produce

REPO = Path(__file__).resolve().parents[3]
SPARK_LINE = re.compile(  # log4j's console lines, its start-up notice, the JVM's warning about incubator modules
    r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (INFO|WARN|ERROR) |log4j|^WARNING: Using incubator", re.M
)


def run(home: Home, job_name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), *extra, "run", job_name, "--available-now"]
    done = subprocess.run(
        [*argv, "--master", "local[1]"], env=env, capture_output=True, text=True, timeout=600, cwd=home.root.parent
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow  # a spark-submit driver
def test_a_short_run_prints_no_spark_log_line_and_verbose_shows_them(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    produce(home, "events", 40, 4)
    config = job(home, "quiet", 1)
    log = log_path(home)

    done = run(home, config.name)
    terminal = done.stdout + done.stderr
    assert SPARK_LINE.findall(terminal) == [], terminal
    assert terminal.count(f"Spark's and Airflow's own log lines go to {log} (--verbose shows them here)") == 1
    assert f"[{config.name}] model v1: factor 1" in terminal  # the platform's own lines stay
    kept = log.read_text()
    assert SPARK_LINE.search(kept), kept[:2000]  # Spark's lines are in the file, not lost

    produce(home, "events", 20, 4)
    verbose = run(home, config.name, "--verbose")
    assert SPARK_LINE.search(verbose.stderr), verbose.stderr[-2000:]  # --verbose: on the terminal, as Spark wrote them
    assert "own log lines go to" not in verbose.stderr and log.read_text() == kept


def test_a_home_that_does_not_exist_is_not_made_by_the_libraries_log_lines(tmp_path: Path) -> None:
    """A client's log line (librdkafka's failed connections) during a command on a mistyped --home made
    ``<home>/logs``; its lines are held back, dropped if the command made nothing, written if it made the home."""
    refused = Home(tmp_path / "refused")
    with quiet(refused):
        logging.getLogger("pipelines.systems.kafka.librdkafka").error("FAIL Connect to 127.0.0.1:1 failed")
    assert not (tmp_path / "refused").exists()

    made = Home(tmp_path / "made")
    with quiet(made):
        logging.getLogger("held").error("before the home was made")
        made.streams.local_path().mkdir(parents=True)  # what a command that writes does
        logging.getLogger("written").error("after")
        logging.getLogger("written").error("and again")
    lines = log_path(made).read_text().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["before the home was made", "after", "and again"]


def test_the_note_held_until_done_is_said_on_success_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sql``'s failed query was two lines, the note first: inside ``until_done`` the note waits for success."""
    home = Home(tmp_path / "home")
    note = f"Spark's and Airflow's own log lines go to {log_path(home)} (--verbose shows them here)\n"
    with quiet(home):
        with pytest.raises(RuntimeError), until_done():
            announce()
            raise RuntimeError("the query failed")
        assert capsys.readouterr().err == ""
        with until_done():
            announce()
            assert capsys.readouterr().err == ""
        assert capsys.readouterr().err == note
        announce()  # once per command
        assert capsys.readouterr().err == ""
