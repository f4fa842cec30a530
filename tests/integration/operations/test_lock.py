"""The scaling lock on real Delta tables: one holder, re-entrant for its owner, leases that expire, races."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.control.locks import ScalingInProgressError, ScalingLock
from pipelines.storage.home import Home


def test_one_holder_at_a_time_and_reentrant_for_its_owner(home: Home) -> None:
    lock = ScalingLock(home)
    assert lock.state("job") is None
    assert lock.acquire("job", "run-a", "rescale to 4").status == "acquired"
    with pytest.raises(ScalingInProgressError, match=r"run-a holds it for 'rescale to 4'"):
        lock.acquire("job", "run-b", "rescale to 8")
    assert lock.acquire("job", "run-a", "rescale to 4").status == "renewed"
    assert lock.acquire("other-job", "run-b", "rescale to 8").status == "acquired"  # locks are per job
    assert not lock.release("job", "run-b")  # not theirs
    assert lock.state("job").owner == "run-a"
    assert lock.release("job", "run-a")
    assert lock.acquire("job", "run-b", "rescale to 8").status == "acquired"
    assert [lock.state("job").seq, lock.state("other-job").seq] == [4, 1]


def test_an_expired_lease_is_taken_over_and_says_whose_it_was(home: Home) -> None:
    lock = ScalingLock(home)
    lock.acquire("job", "crashed-run", "rescale to 4", ttl_s=0.3)
    with pytest.raises(ScalingInProgressError):
        lock.acquire("job", "next-run", "rescale to 4")
    time.sleep(0.5)
    state = lock.acquire("job", "next-run", "rescale to 4")
    assert (state.status, state.owner) == ("taken over", "next-run")
    assert not lock.release("job", "crashed-run")  # the old holder cannot release the new hold


def test_wait_acquire_waits_for_the_holder_then_refuses_after_its_wait(home: Home) -> None:
    lock = ScalingLock(home)
    lock.acquire("job", "a", "x", ttl_s=0.6)
    started = time.monotonic()
    assert lock.wait_acquire("job", "b", "y", wait_s=5, poll_s=0.1).owner == "b"
    assert 0.4 < time.monotonic() - started < 5
    with pytest.raises(ScalingInProgressError):
        lock.wait_acquire("job", "c", "z", wait_s=0.3, poll_s=0.1)


def _race(root: str, owner: str, start_at: float, results: mp.Queue) -> None:
    lock = ScalingLock(Home(Path(root)))
    lock.state("job")  # table loaded before the start line, so every racer decides on the same snapshot
    time.sleep(max(0.0, start_at - time.time()))
    try:
        lock.acquire("job", owner, "race")
        results.put((owner, "won"))
    except ScalingInProgressError:
        results.put((owner, "refused"))


def test_racing_processes_exactly_one_wins(home: Home) -> None:
    ScalingLock(home).release("job", "nobody")  # nothing to release: the table does not exist yet
    ScalingLock(home)._table.ensure()
    ctx = mp.get_context("spawn")  # deltalake must not be forked
    results: mp.Queue = ctx.Queue()
    start_at = time.time() + 6.0  # spawned interpreters import pyarrow and deltalake first
    procs = [ctx.Process(target=_race, args=(str(home.root), f"racer-{i}", start_at, results)) for i in range(4)]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    winners = [o for o, r in outcomes.items() if r == "won"]
    assert len(winners) == 1, outcomes
    assert ScalingLock(home).state("job").owner == winners[0]


def test_two_acquirers_deciding_on_one_snapshot_cannot_both_commit(home: Home) -> None:
    """B takes the lock after A has read it free and before A commits: A's commit must fail, not land too."""
    lock_a, lock_b = ScalingLock(home), ScalingLock(home)
    lock_b.acquire("job", "b", "warm-up")
    lock_b.release("job", "b")
    read_free = lock_a.state
    sneaked: list[bool] = []

    def state_then_b_sneaks_in(job: str):
        seen = read_free(job)
        if not sneaked:
            sneaked.append(True)
            lock_b.acquire(job, "b", "sneaks in")
        return seen

    lock_a.state = state_then_b_sneaks_in  # type: ignore[method-assign]
    with pytest.raises(ScalingInProgressError, match="at the same moment"):
        lock_a.acquire("job", "a", "rescale")
    state = ScalingLock(home).state("job")
    assert (state.owner, state.status, state.seq) == ("b", "acquired", 3)


HOLD = """
import sys, time
from pathlib import Path
from pipelines.storage.home import Home
from pipelines.control.locks import ScalingLock, process_owner
owner = process_owner("cli")
ScalingLock(Home(Path(sys.argv[1]))).acquire("job", owner, "rescale to 4")
print(owner, flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(home: Home, seconds: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(home.root), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    owner = proc.stdout.readline().strip()
    assert owner.startswith("cli:"), "the holder process took the lock"
    return proc, owner


def test_a_cli_holder_whose_process_died_is_taken_over_at_once_a_live_one_is_not(home: Home) -> None:
    lock = ScalingLock(home)
    proc, owner = _holder(home, 60)
    try:
        host_and_pid = ":".join(owner.split(":")[1:3])
        with pytest.raises(ScalingInProgressError, match=f"{host_and_pid}"):  # the refusal names host and pid
            lock.acquire("job", "next-run", "rescale to 8")
    finally:
        proc.kill()
        proc.wait()
    state = lock.acquire("job", "next-run", "rescale to 8")  # its 15-minute lease has not run out
    assert (state.status, state.owner) == ("taken over", "next-run")
    assert lock._table.read("job").to_pandas().sort_values("seq")["previous_owner"].iloc[-1] == owner


def test_the_operator_releases_a_lock_from_the_cli_and_the_row_says_whose_it_was(home: Home, tmp_path: Path) -> None:
    import json

    ScalingLock(home).acquire("job", "airflow-run-7", "rescale to 4")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)

    shown = json.loads(cli("lock", "show", "job", "--json").stdout)
    assert (shown["owner"], shown["held"], shown["holder_dead"]) == ("airflow-run-7", True, False)
    refused = cli("lock", "release", "job")
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert "airflow-run-7 holds it for 'rescale to 4'" in refused.stderr, "the refusal says whose lock it would take"
    done = cli("lock", "release", "job", "--yes")
    assert done.returncode == 0 and "released the lock airflow-run-7 held for 'rescale to 4'" in done.stdout
    state = ScalingLock(home).state("job")
    assert state.status == "released" and state.owner.startswith("cli:")
    assert ScalingLock(home).acquire("job", "run-8", "rescale to 2").status == "acquired"
    ScalingLock(home).release("job", "run-8")
    for yes in ("--yes", None):  # a free lock needs no confirmation to say so
        free = cli("lock", "release", "job", *([yes] if yes else []))
        assert free.returncode == 0 and "the lock is not held" in free.stdout, free
    # a name no job and no lock has is a mistake, not a free lock, and is said before any --yes is asked for
    for args in (("show", "jbo"), ("release", "jbo", "--yes"), ("release", "jbo")):
        unknown = cli("lock", *args)
        assert unknown.returncode == 2, unknown
        assert unknown.stderr.startswith("error: job 'jbo' has no job model"), unknown.stderr
