"""A home a user damaged or cannot write: one ``error:`` line naming the table or path and what to do, exit 2.

Every case runs ``python -m pipelines`` in a subprocess, as an operator would,
against a home made by the CLI itself and then damaged the way disks and
copies damage files: a data file cut short, a commit cut short, garbled or
emptied, a home made read-only.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RESTORE_DATA = (
    "restore {table} (or that file) from a backup; or return the table to a version from before the file was added, "
    "using its history: deltalake's DeltaTable('{table}').history() lists the versions and .restore(VERSION) goes "
    "back to one (the rows of that file are lost)"
)
RESTORE_COMMIT = (
    "restore {table} from a backup; or, if {commit} is the table's latest commit, move it out of _delta_log to return "
    "the table to version {before} (the change that commit made is lost)"
)

pytestmark = pytest.mark.slow  # CLI runs that reach Spark


def cli(home: Path, *args: str, rc: int, as_user: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pipelines", "--home", str(home), *args]
    done = subprocess.run(
        argv, cwd=home.parent, env=env, capture_output=True, text=True, timeout=120, preexec_fn=as_user
    )
    assert done.returncode == rc, f"{args}: rc {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def refused(home: Path, *args: str, as_user: Callable[[], None] | None = None) -> str:
    """The one error line of a refused command; ``--json`` gives the same message as an object on stdout."""
    done = cli(home, "--json", *args, rc=2, as_user=as_user)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    message = lines[0].removeprefix("error: ")
    assert json.loads(done.stdout)["message"] == message
    return message


@pytest.fixture(scope="module")
def made_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with a stream, records and a job, made once and copied per test (it takes a few seconds)."""
    home = tmp_path_factory.mktemp("made") / "home"
    cli(home, "stream", "create", "events", "--partitions", "2", rc=0)
    cli(home, "stream", "produce", "events", "--records", "40", "--keys", "4", "--seed", "1", rc=0)
    cli(home, "job", "create", "enrichment", "--config", str(REPO / "include/jobs/enrichment.yaml"), rc=0)
    return home


@pytest.fixture
def home(made_home: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    subprocess.run(["cp", "-a", str(made_home), str(copy)], check=True)
    return copy


def _latest_commit(table: Path) -> Path:
    return max((table / "_delta_log").glob("*.json"))


def _data_file(table: Path) -> Path:
    return min(p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts)


def test_a_damaged_data_file_of_a_control_table_is_named_with_what_to_do(home: Path) -> None:
    table = home / "control" / "job_models"
    damaged = _data_file(table)
    damaged.write_bytes(damaged.read_bytes()[:100])
    name = damaged.relative_to(table)
    expected = (
        f"control table 'job_models' at {table} cannot be read: data file {name} is damaged (Parquet magic bytes not "
        "found in footer. Either the file is corrupted or this is not a parquet file.); nothing was changed. "
        "To fix: " + RESTORE_DATA.format(table=table)
    )
    for command in (["job", "list"], ["job", "show", "enrichment"], ["rescale", "enrichment", "--factor", "2"]):
        assert refused(home, *command) == expected, command
    assert json.loads(cli(home, "--json", "job", "list", rc=2).stdout)["error"] == "damaged_table"


@pytest.mark.parametrize(
    ("table", "damage", "problem"),
    [
        (
            "control/job_models",
            lambda f: f.write_bytes(f.read_bytes().splitlines()[0][:-1]),  # cut short inside its first action
            "is truncated or garbled (Kernel error: Json error: Truncated record whilst reading object)",
        ),
        (
            "control/scaling_locks",
            lambda f: f.write_text("{{ not json\n"),
            "is truncated or garbled (Kernel error: Json error: Encountered unexpected '{' whilst parsing object)",
        ),
        ("control/checkpoints", lambda f: f.write_bytes(b""), "is empty (truncated)"),
        (
            "streams/events",
            lambda f: f.write_bytes(f.read_bytes().splitlines()[0][:-1]),
            "is truncated or garbled (Kernel error: Json error: Truncated record whilst reading object)",
        ),
    ],
    ids=["job_models-truncated", "scaling_locks-garbled", "checkpoints-emptied", "stream-truncated"],
)
def test_a_damaged_commit_is_named_with_the_version_to_go_back_to(
    home: Path, table: str, damage: Callable[[Path], object], problem: str
) -> None:
    path = home / table
    commit = _latest_commit(path)
    damage(commit)
    kind = "stream" if table.startswith("streams/") else "control table"
    expected = (
        f"{kind} '{path.name}' at {path} cannot be read: its commit _delta_log/{commit.name} {problem}; nothing was "
        "changed. To fix: "
        + RESTORE_COMMIT.format(table=path, commit=commit.name, before=int(commit.name.split(".")[0]) - 1)
    )
    command = {
        "control/job_models": ["job", "show", "enrichment"],
        "control/scaling_locks": ["lock", "show", "enrichment"],
        "control/checkpoints": ["job", "checkpoints", "enrichment"],
        "streams/events": ["stream", "describe", "events"],
    }[table]
    assert refused(home, *command) == expected
    # the same table read by a command that would change state: refused before anything is written
    before = _tree(home)
    assert refused(home, "rescale", "enrichment", "--factor", "2") == expected
    assert _tree(home) == before


def test_a_damaged_sink_log_fails_verify_with_the_sink_named(home: Path) -> None:
    table = home / "sinks" / "enriched"
    commit = _latest_commit(table)
    assert commit.name == "00000000000000000000.json", "job create made the sink: its only commit"
    commit.write_text("garbage\n")
    expected = (
        f"sink table 'enriched' at {table} cannot be read: its commit _delta_log/{commit.name} is truncated or "
        "garbled (Kernel error: Json error: Encountered unexpected 'g' whilst parsing value); nothing was changed. "
        f"To fix: restore {table} from a backup ({commit.name} is its first commit: there is no earlier version to "
        "go back to)"
    )
    assert refused(home, "verify", "enrichment") == expected


def test_a_damaged_data_file_of_a_stream_is_named_when_its_records_are_read(home: Path) -> None:
    from pipelines.errors import DamagedTableError
    from pipelines.systems.deltalog import DeltaLog

    table = home / "streams" / "events"
    damaged = _data_file(table)
    damaged.write_bytes(b"PAR1" + b"\0" * 64)
    partition = int(damaged.parent.name.removeprefix("partition="))
    log = DeltaLog(home / "streams")
    end = int(log.describe("events").partitions[partition].end)
    expected = (
        f"stream 'events' at {table} cannot be read: data file {damaged.relative_to(table)} is damaged ("
        "Parquet magic bytes not found in footer. Either the file is corrupted or this is not a parquet file.); "
        "nothing was changed. To fix: " + RESTORE_DATA.format(table=table)
    )
    with pytest.raises(DamagedTableError) as caught:
        log.read_range("events", partition, 0, end)
    assert str(caught.value) == expected


def test_the_advice_works_moving_the_damaged_latest_commit_aside_restores_the_version_before(home: Path) -> None:
    table = home / "control" / "job_models"
    commit = _latest_commit(table)  # job create's activation of v1
    commit.write_bytes(commit.read_bytes()[:50])
    refused(home, "job", "show", "enrichment")
    commit.rename(home / commit.name)
    shown = json.loads(cli(home, "--json", "job", "show", "enrichment", rc=0).stdout)
    assert (shown["active_version"], shown["latest_version"]) == (None, 1)  # v1 planned, its activation is lost


# ---------------------------------------------------------------------------------------------- read-only home

_libc = ctypes.CDLL(None, use_errno=True)
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3


def _without_override() -> None:
    """In the child before exec: root gives up the capabilities that let it write where the mode says no.

    Dropped from the bounding set, they are not in the new program's
    permitted set, so root's writes obey file modes like anyone's. A user
    who is not root obeys them anyway.
    """
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed: cannot make root obey file modes")


AS_USER = _without_override if os.geteuid() == 0 else None


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _read_only(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)


def test_a_read_only_home_is_refused_before_anything_is_written_and_still_read(home: Path) -> None:
    _read_only(home)
    probe = subprocess.run(["touch", str(home / "probe")], preexec_fn=AS_USER, capture_output=True)
    assert probe.returncode != 0, "the child must obey file modes, or this test proves nothing"
    before = _tree(home)
    expected = (
        f"the home {home} cannot be written by this process; this command changes state there, and nothing was "
        "changed. Make the home writable for this user (or its file system read-write), or give another --home; "
        "commands that only read (job list, job show, lock show, stream describe) work as it is"
    )
    for command in (
        ["rescale", "enrichment", "--factor", "2"],
        ["stream", "produce", "events", "--records", "5", "--keys", "2"],
        ["autosize", "enrichment"],
        ["run", "enrichment", "--available-now"],
    ):
        assert refused(home, *command, as_user=AS_USER) == expected, command
    done = cli(home, "--json", "job", "list", rc=0, as_user=AS_USER)
    assert [j["job"] for j in json.loads(done.stdout)] == ["enrichment"]
    assert _tree(home) == before


def test_lock_show_reads_a_held_lease_from_a_read_only_home(home: Path) -> None:
    """The store's clock needs a probe write; a process that cannot write still shows the lease, writing nothing."""
    from pipelines.control.locks import ScalingLock
    from pipelines.storage.home import Home

    ScalingLock(Home(home)).acquire("enrichment", "run-elsewhere", "rescale to 4")
    _read_only(home)
    before = _tree(home)
    shown = cli(home, "lock", "show", "enrichment", rc=0, as_user=AS_USER).stdout
    assert re.fullmatch(
        r"enrichment: run-elsewhere holds it for 'rescale to 4' since \S+ \S+ UTC \(lease expires in (8\d\d|900)s\)\n",
        shown,
    ), shown
    assert _tree(home) == before


def test_one_read_only_table_folder_is_named_and_the_rescale_takes_no_lock(home: Path) -> None:
    folder = home / "control" / "job_models" / "job=enrichment"
    _read_only(folder)
    before = _tree(home)
    message = refused(home, "rescale", "enrichment", "--factor", "2", as_user=AS_USER)
    assert message.startswith(f"the home {home} cannot be written by this process ({folder} is not writable); ")
    assert _tree(home) == before  # no lock row, no event, no model: nothing half-written


def test_a_run_over_a_damaged_stream_file_ends_with_that_error_not_spark_s_trace(home: Path) -> None:
    """The damage is met inside a Spark task; the user gets the platform's message and its code, exit 2."""
    table = home / "streams" / "events"
    damaged = _data_file(table)
    damaged.write_bytes(b"PAR1" + b"\0" * 64)
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pipelines", "--home", str(home), "--json", "run", "enrichment", "--available-now"]
    done = subprocess.run(
        [*argv, "--master", "local[2]"], cwd=home.parent, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stderr[-3000:]
    expected = (
        f"job enrichment v1 failed in a micro-batch: stream 'events' at {table} cannot be read: data file "
        f"{damaged.relative_to(table)} is damaged (Parquet magic bytes not found in footer. Either the file is "
        "corrupted or this is not a parquet file.); nothing was changed. To fix: " + RESTORE_DATA.format(table=table)
    )
    assert done.stderr.splitlines()[-1] == f"error: {expected}"
    assert json.loads(done.stdout) == {"error": "damaged_table", "message": expected}, "stdout: the answer alone"
