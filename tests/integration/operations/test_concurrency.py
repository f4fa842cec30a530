"""Scaling operations that meet: each refusal names the holder of the job's lock, and nothing else changes.

The real operations (``scaling.begin`` takes the lock as ``pipelines rescale``
and the repartition watch do) on real Delta tables; the refused side is the
CLI in a subprocess, as an operator would meet it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.control import ControlPlane
from pipelines.control.decisions import read_decisions
from pipelines.control.locks import ScalingLock, process_owner
from pipelines.core.autosize import HOLD, SKIP
from pipelines.operations import repartition, scaling
from pipelines.operations.autosize import evaluate
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from ..runtime.jobs import job, produce

REPO = Path(__file__).resolve().parents[3]

# rescales and watches run as CLI processes (refused before Spark, but real drivers where they proceed)
pytestmark = pytest.mark.slow


def cli(home: Home, *args: str, rc: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), *args]
    done = subprocess.run(argv, cwd=home.root.local_path().parent, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == rc, f"{args}: rc {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def holder_text(home: Home, job: str, owner: str, pid: int, operation: str) -> str:
    """How a refusal names the holder: owner, pid and host, the operation, since when; the lease left varies."""
    state = ScalingLock(home).state(job)
    assert state is not None and state.owner == owner
    return (
        re.escape(
            f"{owner} (pid {pid} on host {socket.gethostname()}) holds it for {operation!r} "
            f"since {state.at:%Y-%m-%d %H:%M:%S} UTC (lease expires in "
        )
        + r"\d+s\)"
    )


def snapshot(home: Home, job: str) -> tuple[object, ...]:
    control = ControlPlane(home)
    events = [(e.event_id, e.status) for e in control.events.history(job)]
    lock = ScalingLock(home).state(job)
    return (control.job_models.latest_version(job), control.job_models.active_version(job), events, lock)


def test_a_rescale_during_an_expansion_is_refused_naming_the_expansion_and_its_holder(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "grows", 1)
    DeltaLog(home.streams).expand("events", 4)
    [change] = repartition.detect(home, [config.name])
    owner = process_owner("cli")  # the absorbing operation lives in this test's process
    scaling.begin(home, change.request(), owner, say=lambda m: None)
    before = snapshot(home, config.name)

    refused = cli(home, "rescale", config.name, "--factor", "2", rc=2).stderr
    expected = (
        re.escape(f"error: job {config.name!r} is already being scaled: ")
        + holder_text(home, config.name, owner, os.getpid(), f"partition expansion of {config.name} to factor (same)")
        + re.escape("; wait for it to finish (or for its lease to expire) and try again\n")
    )
    assert re.fullmatch(expected, refused), refused
    assert snapshot(home, config.name) == before  # no event, no model, the lock still the expansion's


def test_an_autosizer_decision_during_a_manual_rescale_records_a_skip_naming_the_holder(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "busy", 1)
    owner = process_owner("cli")
    op = scaling.begin(home, scaling.ScalingRequest(config.name, 4, "manual"), owner, say=lambda m: None)
    before = snapshot(home, config.name)

    decision = evaluate(home, config.name)
    holder = holder_text(home, config.name, owner, os.getpid(), f"rescale of {config.name} to factor 4")
    assert (decision.action, decision.factor) == (SKIP, 1)
    [reason] = decision.reasons
    assert re.fullmatch(re.escape(f"skipped: job {config.name!r} is being scaled; ") + holder, reason), reason
    [recorded] = read_decisions(home, config.name)
    assert (recorded["action"], recorded["target_factor"], recorded["reasons"]) == (SKIP, 1, [reason])

    # the CLI's view of the same: a recorded skip, and "auto" refuses to rescale
    shown = json.loads(cli(home, "--json", "autosize", config.name, rc=0).stdout)
    skipped = re.escape(f"skipped: job {config.name!r} is being scaled; ") + holder
    assert shown["action"] == SKIP and re.fullmatch(skipped, shown["reasons"][0]), shown
    auto = cli(home, "rescale", config.name, "--factor", "auto", rc=2).stderr
    assert re.fullmatch(
        re.escape(f"error: the autosizer skipped: job {config.name!r} is being scaled; ")
        + holder
        + re.escape("; try again when it is done\n"),
        auto,
    ), auto
    assert [d["action"] for d in read_decisions(home, config.name)] == [SKIP, SKIP, SKIP]
    assert snapshot(home, config.name) == before  # the rescale's event and lock untouched, no model planned

    scaling.finish(home, op, say=lambda m: None)  # the rescale ends (rolled back: it never migrated)
    assert evaluate(home, config.name).action == HOLD  # decided again once the lock is free


HOLDER = """
import sys, time
from pathlib import Path
from pipelines.storage.home import Home
from pipelines.control.locks import process_owner
from pipelines.operations import scaling
owner = process_owner("cli")
request = scaling.ScalingRequest(sys.argv[2], 4, "the first rescale")
scaling.begin(Home(Path(sys.argv[1])), request, owner, say=lambda m: None)
print(owner, flush=True)
time.sleep(120)
"""


def test_two_rescales_at_once_the_second_is_refused_naming_the_first(home: Home) -> None:
    produce(home, "events", 40, keys=5)
    config = job(home, "twice", 1)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home.root), config.name], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        owner = first.stdout.readline().strip()  # type: ignore[union-attr]
        assert owner.startswith("cli:"), "the first rescale took the lock"
        before = snapshot(home, config.name)
        refused = cli(home, "--json", "rescale", config.name, "--factor", "8", rc=2)
        message = (
            re.escape(f"job {config.name!r} is already being scaled: ")
            + holder_text(home, config.name, owner, first.pid, f"rescale of {config.name} to factor 4")
            + re.escape("; wait for it to finish (or for its lease to expire) and try again")
        )
        error = json.loads(refused.stdout)
        assert error["error"] == "scaling_in_progress" and re.fullmatch(message, error["message"]), error
        assert refused.stderr == f"error: {error['message']}\n"
        assert snapshot(home, config.name) == before
    finally:
        first.kill()
        first.wait()
