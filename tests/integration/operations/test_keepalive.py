"""The keepalive's round: stale continuous jobs are relaunched together, and a relaunch that dies is a failure.

The drivers are Python snippets that behave as a driver does at its start (register in the drivers table, or
record a failure and exit): what is tested is the round's bookkeeping, which needs no JVM.
"""

from __future__ import annotations

import sys
import time

import pytest

from pipelines.errors import PipelinesError
from pipelines.operations import keepalive
from pipelines.runtime import launcher, requests
from pipelines.storage.home import Home
from tests.integration.runtime.jobs import job, produce

DRIVER = """
import sys, time
from pipelines.control.drivers import Registration
from pipelines.storage.home import Home
from pipelines.runtime import requests
home, job = Home(sys.argv[1]), sys.argv[2]
time.sleep(0.5)  # a session starting
if job == "broken":  # what a driver that cannot open its sink leaves: its failure, one error line, exit 2
    requests.note_failure(home, job, "ConfigError", "sink table broken_out: bad schema")
    print("error: sink table broken_out: bad schema")
    raise SystemExit(2)
Registration(home, job).start()
time.sleep(60)
"""


def test_a_round_relaunches_every_stale_job_and_fails_naming_each_that_died_or_had_failed(
    home: Home, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    produce(home, "events", 10, keys=2)
    healthy, broken = job(home, "healthy", 1).name, job(home, "broken", 1).name
    requests.note_failure(home, healthy, "SourceError", "the broker went away")  # its previous driver's end
    monkeypatch.setattr(
        launcher, "driver_command", lambda home, job, **_: [sys.executable, "-c", DRIVER, str(home.root), job]
    )
    started = time.monotonic()
    try:
        with pytest.raises(PipelinesError) as failed:
            keepalive.keep_running(home, master="local[1]")
        assert time.monotonic() - started < 60, "waited for the starts, not for the cap"
        assert str(failed.value).startswith(
            f"2 continuous job(s) failed: {broken}: job {broken} driver exited with code 2 while starting: sink "
            "table broken_out: bad schema (its log: "
        ), failed.value
        pid = launcher.running_pid(home, healthy)
        assert str(failed.value).endswith(
            f"; {healthy}: its driver had failed (the broker went away); relaunched as pid {pid}"
        ), failed.value
        said = capsys.readouterr().out
        assert f"{healthy}: {{'state': 'relaunched'" in said and "'start': 'running'" in said, said
        assert "'previous_failure': 'the broker went away'" in said, said
        assert f"{broken}: {{'state': 'failed to start'" in said, said

        assert launcher.running_pid(home, healthy) is not None, "the healthy job's driver runs on"
        assert launcher.running_pid(home, broken) is None and not launcher.pid_file(home, broken).exists()
        assert requests.read_failure(home, healthy) is None, "a relaunch clears what the previous driver left"

        # the next round: the healthy one is live and no longer named, the broken one fails again
        with pytest.raises(
            PipelinesError, match=f"^1 continuous job\\(s\\) failed: {broken}: job {broken} driver "
        ) as again:
            keepalive.keep_running(home, master="local[1]")
        assert healthy not in str(again.value)
        assert f"{healthy}: {{'state': 'live'" in capsys.readouterr().out
    finally:
        launcher.kill(home, healthy)


def test_report_mode_launches_nothing_and_never_fails(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    produce(home, "events", 10, keys=2)
    name = job(home, "broken", 1).name
    monkeypatch.setattr(launcher, "driver_command", lambda *_, **__: pytest.fail("report mode launched a driver"))
    assert keepalive.keep_running(home, master="local[1]", launch=False)[name]["state"] == "down"
