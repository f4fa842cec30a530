"""An input expansion is absorbed with the job's own grouper: SEP-5 keeps the task count and names."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock, process_owner
from pipelines.jobs.config import JobConfig
from pipelines.operations import repartition, scaling
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog

from ..runtime.jobs import DEMO, produce


def test_a_per_ssp_job_over_two_streams_keeps_its_tasks_when_one_stream_expands(home: Home) -> None:
    produce(home, "events", 40, keys=5, partitions=2)
    produce(home, "orders", 40, keys=5, partitions=2)
    raw = JobConfig.load(DEMO).to_dict()
    raw.update(
        name="per_ssp",
        grouper="GroupBySystemStreamPartition",
        elasticity_factor=2,
        inputs=[{"system": "deltalog", "stream": "events"}, {"system": "deltalog", "stream": "orders"}],
        sink={"table": "per_ssp_out"},
        dead_letter={"table": "per_ssp_dead"},
    )
    first = create_job(home, JobConfig.from_dict(raw))
    assert first.task_count == 8
    DeltaLog(home.streams).expand("events", 4)

    [change] = repartition.detect(home, ["per_ssp"])
    assert (change.stream, change.before, change.after, change.error) == ("deltalog/events", 2, 4, None)
    assert change.grouper == "GroupBySystemStreamPartition"
    plan = scaling.plan(home, change.request())
    assert plan["grouper"] == "GroupBySystemStreamPartition"
    assert plan["virtual_tasks"] == 8, "SEP-5: an expansion does not change the task count"
    assert plan["partitions"] == {"deltalog.events": 4, "deltalog.orders": 2}
    assert ControlPlane(home).job_models.latest_version("per_ssp") == 1, "a plan writes nothing"


def test_an_expansion_whose_absorption_was_killed_is_absorbable_not_busy(home: Home) -> None:
    """A killed ``watch --apply`` leaves its lock; the next look must take over, not skip the job forever."""
    produce(home, "events", 40, keys=5, partitions=2)
    raw = JobConfig.load(DEMO).to_dict()
    raw.update(name="grows", sink={"table": "grows_out"}, dead_letter={"table": "grows_dead"})
    create_job(home, JobConfig.from_dict(raw))
    DeltaLog(home.streams).expand("events", 4)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"cli:{socket.gethostname()}:{int(gone.stdout)}:deadbeef"
    ScalingLock(home).acquire("grows", dead, "partition expansion of grows")
    alive = process_owner("cli")  # this process: alive

    [change] = repartition.detect(home, ["grows"])
    assert (change.busy, change.error) == (None, None), "a dead holder does not make the job busy"

    ScalingLock(home).acquire("grows", alive, "taken over by the test")
    [change] = repartition.detect(home, ["grows"])
    assert change.busy is not None and alive in change.busy, "a live holder does"


def test_what_a_killed_absorption_left_is_settled_by_the_next_watch_that_finds_nothing_to_absorb(home: Home) -> None:
    """Killed after activating the expanded model: the next ``watch --apply`` has nothing to absorb, and still
    frees the job (found by the fault matrix: the lock stayed for its 15-minute lease, the event open)."""
    produce(home, "events", 40, keys=5)
    raw = JobConfig.load(DEMO).to_dict()
    raw.update(name="absorbed", sink={"table": "absorbed_out"}, dead_letter={"table": "absorbed_dead"})
    create_job(home, JobConfig.from_dict(raw))
    DeltaLog(home.streams).expand("events", 4)
    [change] = repartition.detect(home, ["absorbed"])
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"cli:{socket.gethostname()}:{int(gone.stdout)}:deadbeef"
    op = scaling.begin(home, change.request(), dead, say=lambda m: None)
    scaling.migrate(home, op, say=lambda m: None)
    scaling.activate(home, op, say=lambda m: None)  # ... and the process dies here

    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "--home", str(home.root), "--json", "watch", "--apply"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"changes": [], "absorbed": []}, "the expansion is in force: nothing to absorb"
    [event] = ControlPlane(home).events.history("absorbed")
    assert event.status == "recovered" and event.finished_at is not None
    state = ScalingLock(home).state("absorbed")
    assert state is not None and not state.held
