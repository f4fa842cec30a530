"""The CLI as operators run it: ``python -m pipelines`` in a subprocess, against a temporary home."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipelines.control import ControlPlane, Home
from pipelines.core.checkpoints import CheckpointMap
from pipelines.core.groupers import plan_job_model
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream, SystemStreamPartition
from pipelines.runtime import requests
from pipelines.systems.deltalog import DeltaLog

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EVENTS = SystemStream("deltalog", "events")


def run(
    tmp_path: Path, *args: str, rc: int = 0, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    env["PYTHONPATH"] = str(REPO)
    env.update(env_extra or {})
    argv = [sys.executable, "-m", "pipelines", "--home", str(tmp_path / "home"), *args]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == rc, f"{args}: rc {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def fails(tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None) -> str:
    """The one-line error a user sees for bad input: exit code 2, no traceback."""
    stderr = run(tmp_path, *args, rc=2, env_extra=env_extra).stderr
    assert stderr.startswith("error: ") and len(stderr.splitlines()) == 1, stderr
    return stderr


def ssp(partition: int, bucket: int | None = None) -> SystemStreamPartition:
    return SystemStreamPartition("deltalog", "events", partition, bucket)


def test_model_plan_prints_containers_tasks_and_buckets(tmp_path: Path) -> None:
    human = run(tmp_path, "model", "plan", "--partitions", "2", "--factor", "2", "--containers", "2").stdout
    assert "factor 2  grouper GroupByPartition  containers 2  tasks 4" in human
    assert "Partition 0-1-2" in human and "[deltalog, events, 0, 1]" in human
    # global options are accepted after the command too
    out = run(tmp_path, "model", "plan", "--partitions", "3", "--factor", "4", "--stream", "clicks", "--json").stdout
    model = JobModel.from_json(json.loads(out))
    assert (model.elasticity_factor, model.task_count) == (4, 12)
    assert {s.stream for s in model.ssp_to_task()} == {"clicks"}
    assert not (tmp_path / "home" / "control" / "job_models").exists()  # a plan is not saved unless asked


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--factor", "0"], "elasticity factor must be >= 1, got 0"),
        (["--factor", "abc"], "elasticity factor must be a whole number >= 1, got 'abc'"),
        (["--factor", "2", "--grouper", "AllSspToSingleTask"], "AllSspToSingleTask cannot be elastic"),
        (["--grouper", "Nope"], "unknown grouper 'Nope'; choose one of AllSspToSingleTask, GroupByPartition"),
        (["--stream", "a b"], "stream name 'a b' is invalid"),
    ],
)
def test_model_plan_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    assert message in fails(tmp_path, "model", "plan", "--partitions", "2", *args)


def test_model_plan_refuses_an_unknown_system_with_or_without_save(tmp_path: Path) -> None:
    """A plan for a system no module serves is no plan: without --save it printed one, with it it was refused."""
    unknown = "error: unknown input system 'zzz'; choose one of deltalog, kafka, kinesis\n"
    plan = ("model", "plan", "--partitions", "2", "--system", "zzz")
    assert fails(tmp_path, *plan) == unknown
    assert fails(tmp_path, *plan, "--save") == unknown  # the same words either way
    assert not (tmp_path / "home" / "control").exists()


def test_model_plan_without_partitions_needs_a_stream(tmp_path: Path) -> None:
    assert "give --partitions N" in fails(tmp_path, "model", "plan", "--factor", "2")


def test_model_migrate_splits_and_adds_partitions(tmp_path: Path) -> None:
    old = CheckpointMap(2, {ssp(0, 0): "10", ssp(0, 1): "7", ssp(1, 0): "3", ssp(1, 1): "5"})
    source = tmp_path / "checkpoints.json"
    source.write_text(json.dumps(old.to_json()))
    migrate = ("model", "migrate", "--from", str(source), "--to-factor", "4", "--partitions")
    out = run(tmp_path, "--json", *migrate, "4")
    new = CheckpointMap.from_json(json.loads(out.stdout))
    assert new.factor == 4
    assert [new.offset(ssp(0), b) for b in range(4)] == ["10", "7", "10", "7"]  # inherited from bucket b mod 2
    assert [new.offset(ssp(p), b) for p in (2, 3) for b in range(4)] == ["0"] * 8  # new partitions: their earliest
    # the rule `stream expand` and the repartition watch hold an expansion to (core.groupers.check_growth)
    assert "goes from 2 to 3 partitions, which is not a multiple of 2" in fails(tmp_path, *migrate, "3")
    human = run(tmp_path, "model", "migrate", "--from", str(source), "--to-factor", "1").stdout
    assert "factor 2 -> 1, 2 -> 2 partitions" in human
    assert [line.split()[-1] for line in human.splitlines()[2:]] == ["7", "3"]  # min of the merged buckets


def test_model_migrate_bad_input(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"factor": 2, "checkpoints": [')
    assert f"checkpoint file {corrupt}: checkpoint map is not valid JSON" in fails(
        tmp_path, "model", "migrate", "--from", str(corrupt), "--to-factor", "2"
    )
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"factor": 2, "checkpoints": [{"ssp": ["deltalog", "events", 0, 0], "offset": "1"}]}))
    assert "has no offset for [deltalog, events, 0, 1]" in fails(
        tmp_path, "model", "migrate", "--from", str(partial), "--to-factor", "4"
    )
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(CheckpointMap(1, {ssp(0): "1", ssp(1): "2"}).to_json()))
    assert "partitions can be added, never removed" in fails(
        tmp_path, "model", "migrate", "--from", str(whole), "--to-factor", "2", "--partitions", "1"
    )
    assert "elasticity factor must be >= 1" in fails(
        tmp_path, "model", "migrate", "--from", str(whole), "--to-factor", "0"
    )
    for earliest, reason in (("abc", "decimal offsets"), ("-5", "offsets >= 0")):  # as the map's own offsets are
        assert f"--earliest: deltalog positions are {reason}" in fails(
            tmp_path,
            "model",
            "migrate",
            "--from",
            str(whole),
            "--to-factor",
            "2",
            "--partitions",
            "4",
            f"--earliest={earliest}",
        )
    assert "cannot read checkpoint file" in fails(
        tmp_path, "model", "migrate", "--from", str(tmp_path / "missing.json"), "--to-factor", "2"
    )


def test_model_migrate_refuses_maps_no_job_has_and_takes_its_own_output(tmp_path: Path) -> None:
    """A stream called 'a/b', a key it would ignore (in the map or in a row), a key written twice, an empty map:
    each was migrated (the last as "0 -> 0 partitions", a factor written twice as the last one); what ``model
    migrate --json`` writes is still a map it reads."""
    row = {"ssp": ["deltalog", "events", 0], "offset": "5"}
    for document, message in (
        ({"checkpoints": [{**row, "ssp": ["deltalog", "a/b", 0]}]}, "checkpoint #0: stream name 'a/b' is invalid"),
        ({"factor": 1, "extra": 1, "checkpoints": [row]}, "unknown key 'extra'; its keys are 'factor' and"),
        ({"checkpoints": [{**row, "ofset": 7}]}, "checkpoint #0 has unknown key 'ofset'; a checkpoint's keys are"),
        ('{"factor": 4, "checkpoints": [' + json.dumps(row) + '], "factor": 1}', "the key 'factor' twice"),
        ({"factor": 1, "checkpoints": []}, "has no checkpoints: nothing to migrate, so probably not the file meant"),
    ):
        source = tmp_path / "map.json"
        source.write_text(document if isinstance(document, str) else json.dumps(document))
        error = fails(tmp_path, "model", "migrate", "--from", str(source), "--to-factor", "2")
        assert error.startswith(f"error: checkpoint file {source}: ") and message in error, error
    kinesis = "shardId-000000000000:49590338271490256608559692538361571095921575989136588898"  # 56 digits
    rows = [{"ssp": ["kinesis", "orders", 0], "offset": kinesis}, {"ssp": ["deltalog", "events", 0], "offset": 10**40}]
    source.write_text(json.dumps({"factor": 1, "checkpoints": rows}))  # a huge offset is no bad input
    migrated = tmp_path / "migrated.json"
    migrated.write_text(run(tmp_path, "--json", "model", "migrate", "--from", str(source), "--to-factor", "2").stdout)
    again = CheckpointMap.from_json(
        json.loads(run(tmp_path, "--json", "model", "migrate", "--from", str(migrated), "--to-factor", "1").stdout)
    )
    assert again.offsets == {SystemStreamPartition("kinesis", "orders", 0): kinesis, ssp(0): str(10**40)}


def test_stream_commands_and_per_key_sequences(tmp_path: Path) -> None:
    from pipelines import cli
    from pipelines.systems.deltalog import DeltaLog
    from pipelines.systems.deltalog.layout import SYSTEM

    assert cli.EMBEDDED_SYSTEM == SYSTEM
    home = Home(tmp_path / "home")
    assert "2 partitions" in run(tmp_path, "stream", "create", "events", "--partitions", "2").stdout
    assert "already exists" in fails(tmp_path, "stream", "create", "events", "--partitions", "2")
    first = run(
        tmp_path, "stream", "produce", "events", "--records", "120", "--keys", "7", "--seed", "1", "--chunk", "50"
    )
    assert "produced 50/120 records" in first.stderr and "produced 120 records over 7 keys" in first.stdout
    (
        home.producers / "deltalog" / "events.json"
    ).local_path().unlink()  # the cache is lost: sequences must continue from the stream
    ends = {
        p: m["end"]
        for p, m in json.loads(run(tmp_path, "--json", "stream", "describe", "events").stdout)["partitions"].items()
    }
    time.sleep(0.02)
    mark = datetime.now(UTC)
    time.sleep(0.02)
    run(tmp_path, "stream", "produce", "events", "--records", "30", "--keys", "7")
    # where a job created with 'start: <mark>' would begin: each partition's first record of the second produce
    at = json.loads(run(tmp_path, "--json", "stream", "describe", "events", "--at", mark.isoformat()).stdout)["at"]
    assert at == {
        "time": mark.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "positions": ends,
    }
    for bad in ("latest", "2026-11-27T08:00:00", "soon"):
        assert "argument --at: " in fails(tmp_path, "stream", "describe", "events", "--at", bad)
    kinesis = ("--system", "kinesis", "--settings", '{"region": "us-east-1"}')
    assert "--at is not available for kinesis" in fails(
        tmp_path, "stream", "describe", "x", *kinesis, "--at", "2026-01-01T00:00:00Z"
    )
    expand = ("stream", "expand", "events", "--partitions")
    assert "to 1 partitions: partitions can be added, never removed" in fails(tmp_path, *expand, "1")
    assert "which is not a multiple of 2" in fails(tmp_path, *expand, "3")
    run(tmp_path, "stream", "expand", "events", "--partitions", "4")
    summary = json.loads(
        run(tmp_path, "--json", "stream", "produce", "events", "--records", "50", "--keys", "9").stdout
    )
    assert summary["records"] == 50 and sum(summary["per_partition"].values()) == 50
    began = time.monotonic()  # continuous load, as the demo's producer makes it: 40 records/s for 1.5 s
    summary = json.loads(
        run(tmp_path, "--json", "stream", "produce", "events", "--rate", "40", "--seconds", "1.5", "--keys", "9").stdout
    )
    assert summary["records"] == 60 and time.monotonic() - began >= 1.5, summary
    assert "--records N (at once) or --rate N" in fails(tmp_path, "stream", "produce", "events", "--keys", "9")
    assert "--rate needs --seconds" in fails(tmp_path, "stream", "produce", "events", "--rate", "9", "--keys", "9")
    described = json.loads(run(tmp_path, "stream", "describe", "events", "--json").stdout)
    assert len(described["partitions"]) == 4
    assert [(e["from_partitions"], e["to_partitions"]) for e in described["expansions"]] == [(2, 4)]
    assert "does not exist" in fails(tmp_path, "stream", "describe", "nope")

    seqs: dict[str, list[int]] = defaultdict(list)
    log = DeltaLog(home.streams)
    for p, meta in log.describe("events").partitions.items():
        for raw in log.read_range("events", p, 0, int(meta.end)).column("value").to_pylist():
            doc = json.loads(raw)
            seqs[doc["key"]].append(doc["seq"])
    assert sum(len(s) for s in seqs.values()) == 260
    assert len(seqs) == 9
    for key, values in seqs.items():
        assert sorted(values) == list(range(len(values))), key  # no repeat and no gap across all five runs


def test_stream_trim_and_compact_say_what_they_did_and_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    run(tmp_path, "stream", "create", "events", "--partitions", "2")
    run(tmp_path, "stream", "produce", "events", "--records", "60", "--keys", "6", "--chunk", "20")  # 3 files each
    time.sleep(0.02)
    before = datetime.now(UTC).isoformat()
    dry = json.loads(run(tmp_path, "--json", "stream", "trim", "events", "--before", before, "--dry-run").stdout)
    assert dry["dry_run"] and dry["version"] is None and dry["files"] == 4 and dry["readers"] == []
    assert [p["kept_from"] for p in dry["partitions"]] == ["last file", "last file"]
    human = run(tmp_path, "stream", "trim", "events", "--older-than", "1ms").stdout
    assert f"{dry['records']} records in 4 files deleted (table version" in human, human
    assert "KEPT FROM" in human and "last file" in human
    described = json.loads(run(tmp_path, "--json", "stream", "describe", "events").stdout)["partitions"]
    assert {int(p): int(m["earliest"]) for p, m in described.items()} == {
        p["partition"]: p["earliest"] for p in dry["partitions"]
    }

    assert "has no retention of its own: say which records to delete with --before TIME or --older-than AGE" in fails(
        tmp_path, "stream", "trim", "events"
    )
    assert "is in the future" in fails(tmp_path, "stream", "trim", "events", "--before", "2999-01-01T00:00:00Z")
    assert "stream 'nope' does not exist" in fails(tmp_path, "stream", "trim", "nope", "--older-than", "1d")
    assert "retention.ms" in fails(tmp_path, "stream", "trim", "events", "--system", "kafka", "--older-than", "1d")
    assert "argument --older-than: must be positive" in fails(tmp_path, "stream", "trim", "events", "--older-than", "0")

    run(tmp_path, "stream", "produce", "events", "--records", "60", "--keys", "6", "--chunk", "20")
    merged = json.loads(run(tmp_path, "--json", "stream", "compact", "events").stdout)
    assert merged["files_before"] == {"0": 4, "1": 4} and merged["files_after"] == {"0": 1, "1": 1}, merged
    described = json.loads(run(tmp_path, "--json", "stream", "describe", "events").stdout)["partitions"]
    assert all(m["earliest"] != "0" for m in described.values()), "the trim's earliest stays"
    assert [m["details"]["files"] for m in described.values()] == [1, 1] and all(
        m["details"]["bytes"] > 0 for m in described.values()
    ), "describe shows what compaction is for"
    assert "FILES  MIB" in run(tmp_path, "stream", "describe", "events").stdout
    assert "stream 'nope' does not exist" in fails(tmp_path, "stream", "compact", "nope")


def test_a_streams_own_retention_is_set_shown_kept_across_an_expansion_and_applied_by_trim(tmp_path: Path) -> None:
    from pipelines.systems.deltalog import DeltaLog

    home = Home(tmp_path / "home")
    assert (
        "retention 30d" in run(tmp_path, "stream", "create", "events", "--partitions", "2", "--retention", "30d").stdout
    )
    run(tmp_path, "stream", "produce", "events", "--records", "40", "--keys", "4", "--chunk", "20")  # 2 files each
    run(tmp_path, "stream", "expand", "events", "--partitions", "4")
    assert DeltaLog(home.streams).retention("events") == 30 * 86_400_000, "an expansion keeps the retention"
    kept = json.loads(run(tmp_path, "--json", "stream", "trim", "events").stdout)
    assert kept["files"] == 0, "nothing is 30 days old"

    time.sleep(0.02)
    shown = json.loads(run(tmp_path, "--json", "stream", "alter", "events", "--retention", "1ms").stdout)
    assert shown["details"]["retention_ms"] == 1 and len(shown["partitions"]) == 4
    ends = {p: m["end"] for p, m in shown["partitions"].items()}
    trimmed = json.loads(run(tmp_path, "--json", "stream", "trim", "events").stdout)
    assert trimmed["files"] == 2 and trimmed["records"] > 0, "the stream's own 1 ms, with no --older-than"

    assert "retention forever" in run(tmp_path, "stream", "alter", "events", "--retention", "forever").stdout
    assert "keeps its records forever" in fails(tmp_path, "stream", "trim", "events")
    assert "retention default" in run(tmp_path, "stream", "alter", "events", "--retention", "default").stdout
    assert "has no retention of its own" in fails(tmp_path, "stream", "trim", "events")

    assert "argument --retention: must be an age" in fails(tmp_path, "stream", "alter", "events", "--retention", "-1")
    assert "at least 1ms" in fails(tmp_path, "stream", "create", "other", "--partitions", "1", "--retention", "0.1ms")
    # what Kinesis cannot keep is refused before anything is sent (no endpoint here: a request would fail otherwise)
    assert "whole hours from 24h to 8760h (365d), got 90m" in fails(
        tmp_path, "stream", "alter", "events", "--system", "kinesis", "--retention", "90m"
    )
    assert "at most 8760h (365d), never forever" in fails(
        tmp_path, "stream", "create", "k", "--partitions", "1", "--system", "kinesis", "--retention", "forever"
    )
    assert "got 366d" in fails(tmp_path, "stream", "alter", "k", "--system", "kinesis", "--retention", "366d")
    assert "stream 'nope' does not exist" in fails(tmp_path, "stream", "alter", "nope", "--retention", "1d")
    log = DeltaLog(home.streams)
    assert log.list_streams() == ["events"], "a refused create makes nothing"
    assert {str(p): m.end for p, m in log.describe("events").partitions.items()} == ends, "alters lose no record"


def test_job_list_show_and_checkpoints(tmp_path: Path) -> None:
    assert "no jobs in" in run(tmp_path, "job", "list").stdout
    cp = ControlPlane(Home(tmp_path / "home"))
    cp.job_models.save(plan_job_model("orders", 1, {EVENTS: 2}, factor=2), "first deployment")
    cp.job_models.activate("orders", 1)
    cp.checkpoints.write("orders", 1, CheckpointMap(2, {ssp(p, b): str(p + b) for p in range(2) for b in range(2)}), -1)
    cp.job_models.save(plan_job_model("orders", 2, {EVENTS: 2}, factor=4), "rescale to 4, not activated")

    jobs = json.loads(run(tmp_path, "job", "list", "--json").stdout)
    assert [(j["job"], j["active_version"], j["latest_version"], j["factor"]) for j in jobs] == [("orders", 1, 2, 2)]
    shown = run(tmp_path, "job", "show", "orders").stdout
    assert "active version 1, factor 2" in shown and "rescale to 4, not activated" in shown
    assert "activated *" in shown
    written = run(tmp_path, "job", "checkpoints", "orders", "--json").stdout
    checkpoints = CheckpointMap.loads(written)  # as 'model migrate --from' reads it: no key twice, none unknown
    assert checkpoints.offset(ssp(1), 1) == "2"
    assert "known jobs: orders" in fails(tmp_path, "job", "show", "payments")
    assert "version 2 has no checkpoints" in fails(tmp_path, "job", "checkpoints", "orders", "--version", "2")


def test_model_plan_builds_on_the_active_model(tmp_path: Path) -> None:
    cp = ControlPlane(Home(tmp_path / "home"))
    grouper = "GroupByPartitionFixedTaskNum"
    cp.job_models.save(plan_job_model("orders", 1, {EVENTS: 2}, grouper=grouper), "first")
    cp.job_models.activate("orders", 1)
    cp.checkpoints.write("orders", 1, CheckpointMap(1, {ssp(0): "0", ssp(1): "0"}), batch_id=-1)
    run(tmp_path, "stream", "create", "events", "--partitions", "4")  # the input, already expanded
    plan = ["model", "plan", "--job", "orders", "--grouper", grouper, "--factor", "2"]
    assert "goes from 2 to 3 partitions, which is not a multiple" in fails(tmp_path, *plan, "--partitions", "3")
    fresh = ["model", "plan", "--job", "fresh", "--partitions", "4", "--save"]
    assert "needs a reason" in fails(tmp_path, *fresh, "--reason", " ")
    assert "has no job model" in fails(tmp_path, "lock", "show", "fresh"), "a refused save took no lock"
    out = run(tmp_path, *plan, "--partitions", "4", "--save", "--reason", "input expanded", "--json")
    model = JobModel.from_json(json.loads(out.stdout))
    assert model.version == 2
    by_base: dict[str, set[int]] = defaultdict(set)
    for s, task in model.ssp_to_task().items():
        by_base[task.base].add(s.partition)
    assert by_base == {"Partition 0": {0, 2}, "Partition 1": {1, 3}}  # SEP-5: keys stay with their task
    assert cp.job_models.latest_version("orders") == 2 and cp.job_models.active_version("orders") == 1
    start = cp.checkpoints.start("orders", 2)
    assert {s.partition for s in start} == {0, 1, 2, 3}, "saved with start checkpoints for every partition"


def test_home_comes_from_the_environment(tmp_path: Path) -> None:
    env = {**os.environ, "PIPELINES_HOME": str(tmp_path / "env-home"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "job", "list"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert f"no jobs in {tmp_path / 'env-home' / 'control'}" in done.stdout


def test_job_create_refuses_a_key_written_twice_and_writes_nothing(tmp_path: Path) -> None:
    """The demo config with ``elasticity_factor`` given twice: one error line naming both, not a job at factor 4."""
    lines = (REPO / "include/jobs/enrichment.yaml").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("elasticity_factor:"))
    lines.insert(at + 1, "elasticity_factor: 4")
    config = tmp_path / "twice.yaml"
    config.write_text("\n".join(lines) + "\n")
    message = fails(tmp_path, "job", "create", "enrichment", "--config", str(config))
    assert message == (
        f"error: job config {config} is not valid YAML: duplicate key 'elasticity_factor' at line {at + 2}, "
        f"column 1 (first at line {at + 1}; the keys of a mapping must be unique)\n"
    )
    assert not (tmp_path / "home" / "control").exists()  # refused before the home is touched


def test_a_home_under_a_file_is_refused_naming_the_home(tmp_path: Path) -> None:
    """A home below a regular file can never be a directory: reads answered "no jobs" with exit 0 and writes
    failed with a bare "Not a directory (<home>/_pipelines/clock)"; every command now says which home it is."""
    (tmp_path / "afile").write_text("not a home")
    home = tmp_path / "afile" / "sub"
    reads = (["job", "list"], ["watch"], ["store", "list", "x"])
    for command in (*reads, ["stream", "create", "events", "--partitions", "1"]):
        done = subprocess.run(
            [sys.executable, "-m", "pipelines", "--home", str(home), *command],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stdout, done.stderr) == (
            2,
            "",
            f"error: --home {str(home)!r} cannot be a directory: {tmp_path / 'afile'} is a file; "
            "give the home's directory\n",
        ), command
    assert (tmp_path / "afile").read_text() == "not a home"


def test_refused_and_read_only_commands_create_nothing_on_a_home_that_does_not_exist(tmp_path: Path) -> None:
    """`store list` probed the store's clock (``<home>/_pipelines/clock``) before looking for the job, and a Kafka
    client's log lines (librdkafka's "Connect ... failed") made ``<home>/logs/pipelines.log``: a mistyped --home
    came out of a refused command as a new home."""
    home = tmp_path / "home"
    assert "no job 'nope'" in fails(tmp_path, "store", "list", "nope")
    unreachable = ["--system", "kafka", "--settings", '{"bootstrap_servers": "127.0.0.1:1", "timeout_ms": 500}']
    assert "Kafka brokers 127.0.0.1:1 did not answer" in fails(tmp_path, "stream", "describe", "x", *unreachable)
    assert "give --partitions N" in fails(tmp_path, "model", "plan", "--stream", "x", *unreachable)
    assert not home.exists(), sorted(str(p.relative_to(home)) for p in home.rglob("*"))


def _registered_demo_job(tmp_path: Path) -> None:
    run(tmp_path, "stream", "create", "events", "--partitions", "2")
    run(tmp_path, "stream", "produce", "events", "--records", "50", "--keys", "5")
    run(tmp_path, "job", "create", "enrichment", "--config", str(REPO / "include/jobs/enrichment.yaml"))


@pytest.mark.slow
def test_rescale_dry_run_prints_the_plan_and_bad_requests_change_nothing(tmp_path: Path) -> None:
    _registered_demo_job(tmp_path)
    plan = json.loads(run(tmp_path, "--json", "rescale", "enrichment", "--factor", "4", "--dry-run").stdout)
    assert plan["applied"] is False
    assert (plan["plan"]["to_factor"], plan["plan"]["virtual_tasks"], plan["plan"]["to_version"]) == (4, 8, 2)
    assert "elasticity factor must be >= 1" in fails(tmp_path, "rescale", "enrichment", "--factor", "0")
    assert "known jobs: enrichment" in fails(tmp_path, "rescale", "nope", "--factor", "2")
    assert "rescale needs --factor (a number, or auto) or --config" in fails(tmp_path, "rescale", "enrichment")
    assert "new_config.yaml" in fails(tmp_path, "rescale", "enrichment", "--config", str(tmp_path / "new_config.yaml"))
    assert "--sequence 'nocol' is not a column of the job's output; its columns: event_key, seq" in fails(
        tmp_path, "rescale", "enrichment", "--factor", "2", "--sequence", "nocol"
    ), "refused before the rescale starts, not at its closing verification"
    # a master Spark would refuse: refused before the lock, no model planned (it used to be planned and activated,
    # then the catch-up's spark-submit failed ten seconds later with "driver exited with code 1")
    assert "argument --master: Spark master 'bogus://x' is not one" in fails(
        tmp_path, "rescale", "enrichment", "--factor", "2", "--master", "bogus://x"
    )
    assert "$PIPELINES_SPARK_MASTER: Spark master 'spark//h:7077' is not one" in fails(
        tmp_path, "rescale", "enrichment", "--factor", "2", env_extra={"PIPELINES_SPARK_MASTER": "spark//h:7077"}
    )
    same = run(tmp_path, "rescale", "enrichment", "--factor", "1").stdout
    assert "already runs this model: nothing to do" in same
    control = ControlPlane(Home(tmp_path / "home"))
    assert control.job_models.latest_version("enrichment") == 1 and control.events.history("enrichment") == []


def test_stop_of_a_job_with_no_driver_says_nothing_ran_and_leaves_no_request(tmp_path: Path) -> None:
    """It used to answer "stopped", which an operator reads as "I stopped something"."""
    _registered_demo_job(tmp_path)
    assert run(tmp_path, "stop", "enrichment").stdout == "job enrichment: no driver was running; nothing to stop\n"
    answer = json.loads(run(tmp_path, "--json", "stop", "enrichment").stdout)
    assert answer == {"job": "enrichment", "stopped": True, "outcome": "none running"}
    assert not requests.stop_asked(Home(tmp_path / "home"), "enrichment"), "no request outlives the call"
    assert "known jobs: enrichment" in fails(tmp_path, "stop", "enrichmnet")


def test_job_compact_rewrites_a_jobs_control_files_and_refuses_an_unknown_job(tmp_path: Path) -> None:
    _registered_demo_job(tmp_path)
    human = run(tmp_path, "job", "compact", "enrichment").stdout
    header = ["table", "files", "before", "files", "after", "old", "files", "deleted", "rows", "deleted"]
    assert human.splitlines()[0].split() == header
    assert "job_models" in human
    tables = json.loads(run(tmp_path, "--json", "job", "compact", "enrichment", "--min-files", "1").stdout)["tables"]
    job_models = next(t for t in tables if t["table"] == "job_models")
    assert (job_models["files_before"], job_models["files_after"]) == (2, 1), tables  # planned, then activated
    assert "known jobs: enrichment" in fails(tmp_path, "job", "compact", "enrichmnet")
    assert "--min-files: must be a whole number >= 1" in fails(
        tmp_path, "job", "compact", "enrichment", "--min-files", "0"
    )


def test_skip_lost_finds_nothing_on_the_embedded_log_and_refuses_an_unknown_job(tmp_path: Path) -> None:
    """The embedded log deletes nothing, so there is never a gap to skip; the Kafka case is in test_kafka_job."""
    _registered_demo_job(tmp_path)
    assert "nothing to skip" in run(tmp_path, "job", "skip-lost", "enrichment").stdout
    answer = json.loads(run(tmp_path, "--json", "job", "skip-lost", "enrichment", "--dry-run").stdout)
    assert answer == {"job": "enrichment", "gaps": [], "version": None, "dry_run": True}
    assert ControlPlane(Home(tmp_path / "home")).job_models.active_version("enrichment") == 1
    assert "known jobs: enrichment" in fails(tmp_path, "job", "skip-lost", "enrichmnet")


def test_watch_reports_an_absorbable_expansion_and_autosize_holds_without_metrics(tmp_path: Path) -> None:
    _registered_demo_job(tmp_path)
    assert "every job's inputs match" in run(tmp_path, "watch").stdout
    run(tmp_path, "stream", "expand", "events", "--partitions", "4")
    changes = json.loads(run(tmp_path, "--json", "watch").stdout)["changes"]
    assert [(c["job"], c["before"], c["after"], c["error"]) for c in changes] == [("enrichment", 2, 4, None)]
    decision = json.loads(run(tmp_path, "--json", "autosize", "enrichment").stdout)
    assert (decision["action"], decision["factor"]) == ("hold", 1)
    assert any("batch" in r for r in decision["reasons"])


def test_a_samza_job_model_is_imported_and_a_stored_one_exported_in_samzas_form(tmp_path: Path) -> None:
    from pipelines.core.samza import model_to_samza

    stored = plan_job_model("orders", 1, {EVENTS: 2}, factor=2, grouper="GroupBySystemStreamPartition")
    cp = ControlPlane(Home(tmp_path / "home"))
    cp.job_models.save(stored, "first")
    cp.job_models.activate("orders", 1)
    exported = json.loads(run(tmp_path, "--json", "model", "export", "--job", "orders").stdout)
    assert exported == model_to_samza(stored)
    task = exported["containers"]["0"]["tasks"]["SystemStreamPartition [deltalog, events, 1]-0-2"]
    assert task["system-stream-partitions"] == [
        {"system": "deltalog", "stream": "events", "partition": 1, "keyBucket": 0}
    ]
    assert exported["config"]["job.elasticity.factor"] == "2"
    samza = tmp_path / "samza.json"
    samza.write_text(json.dumps(exported))
    imported = JobModel.from_json(json.loads(run(tmp_path, "--json", "model", "import", "--samza", str(samza)).stdout))
    assert imported.ssp_to_task() == stored.ssp_to_task() and imported.grouper == "GroupBySystemStreamPartition"
    assert "cannot read Samza job model" in fails(tmp_path, "model", "import", "--samza", str(tmp_path / "none.json"))
    assert "job name '' is invalid" in fails(tmp_path, "model", "import", "--samza", str(samza), "--job", "")
    samza.write_text('{"config": {"job.name": "orders"}, "containers": {}}')
    assert "containers must be a non-empty object" in fails(tmp_path, "model", "import", "--samza", str(samza))
    assert "known jobs: orders" in fails(tmp_path, "model", "export", "--job", "payments")


@pytest.mark.slow
def test_bad_input_is_refused_with_one_line_and_a_json_error_object(tmp_path: Path) -> None:
    unknown = run(tmp_path, "--json", "job", "show", "payments", rc=2)
    assert json.loads(unknown.stdout) == {
        "error": "unknown_job",
        "message": unknown.stderr.removeprefix("error: ").strip(),
    }
    factor = json.loads(
        run(tmp_path, "--json", "model", "plan", "--partitions", "2", "--factor", "100000", rc=2).stdout
    )
    assert factor["error"] == "config" and "above the maximum 1024" in factor["message"]
    for usage in (["--json", "stream", "create", "x", "--partitions", "abc"], ["stream", "nope", "--json"]):
        refused = run(tmp_path, *usage, rc=2)  # argparse's own refusals too, wherever --json stands
        assert json.loads(refused.stdout) == {
            "error": "usage",
            "message": refused.stderr.removeprefix("error: ").strip(),
        }, refused
    assert "must be a finite number of seconds >= 0, got 'nan'" in fails(
        tmp_path, "rescale", "orders", "--factor", "2", "--lock-wait", "nan"
    )
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"PYTHONPATH": str(REPO)}
    empty = subprocess.run(
        [sys.executable, "-m", "pipelines", "--home", " ", "job", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (empty.returncode, empty.stderr) == (
        2,
        "error: --home is empty; give a directory, or leave it out to use $PIPELINES_HOME or the default\n",
    )


@pytest.mark.slow
def test_the_demo_refuses_to_wipe_a_home_that_holds_other_work(tmp_path: Path) -> None:
    run(tmp_path, "stream", "create", "payments", "--partitions", "1")
    message = fails(tmp_path, "demo", "--seconds", "1")
    assert "the demo wipes its home" in message and "holds stream payments" in message
    assert (tmp_path / "home" / "streams" / "payments").is_dir(), "nothing was wiped"


def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`pipelines ... | head`: the pipe's reader is gone; that is no error of the home's (BrokenPipeError is an
    OSError, and the OSError branch used to answer it with `error: Broken pipe`, exit 2)."""
    from pipelines.cli import main

    run(tmp_path, "stream", "create", "events", "--partitions", "2")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: the first write breaks the pipe
    err = tmp_path / "err.txt"
    out = os.fdopen(write, "w", buffering=1)  # line by line, as to a terminal's pipe: the write itself breaks
    try:
        with err.open("w") as errors:
            rc = main(["--home", str(tmp_path / "home"), "stream", "describe", "events"], out=out, err=errors)
    finally:
        with contextlib.suppress(BrokenPipeError):  # whatever is left in ``out`` cannot go anywhere either
            out.close()
    assert rc == 0 and err.read_text() == ""


@pytest.mark.slow  # where the testbed is found after all, it starts a broker or an emulator
@pytest.mark.parametrize("source", ["kafka", "kinesis"])
def test_a_demo_whose_server_is_in_the_testbed_says_so_where_only_the_package_is_installed(
    tmp_path: Path, source: str
) -> None:
    """The wheel holds ``pipelines`` only: outside a checkout the Kafka and Kinesis demos cannot start a server."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [sys.executable, "-m", "pipelines", "--home", str(tmp_path / "home"), "demo", "--input", source]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        f"error: the {source} demo starts its own server from the repository's testbed/, which an installed "
        f"package does not hold: run it from a checkout (scripts/demo.sh --input {source})"
    ]
    assert list(tmp_path.iterdir()) == [], "nothing is written"


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "scripts/airflow.sh", "--port", "9090"],
        ["bash", "scripts/faults.sh", "--runs", "many"],
        [sys.executable, "-m", "pipelines.demo.soak", "--minutes", "soon"],
        [sys.executable, "-m", "testbed.servers.s3", "--bogus"],
        [sys.executable, "-m", "testbed.servers.s3", "--dir", "scripts/test.sh"],
        [sys.executable, "-m", "testbed.servers.s3", "--dir", "{tmp}/s3", "--bucket", "Invoices_2026"],
        [sys.executable, "-m", "testbed.servers.kafka_broker", "--topic", "events:x"],
        [sys.executable, "-m", "testbed.servers.kafka_broker", "--sasl-user", "alice"],
        [sys.executable, "-m", "testbed.servers.kinesis_emulator", "70000"],
        [sys.executable, "-m", "benchmarks.bench_core", "--factor", "x"],
        [sys.executable, "-m", "benchmarks.bench_rescale", "--steps", "0"],
    ],
    ids=lambda argv: " ".join(argv[-3:]),
)
def test_every_command_line_of_the_project_refuses_bad_input_with_one_error_line(
    tmp_path: Path, argv: list[str]
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AIRFLOW_HOME": str(tmp_path / "airflow"), "SKIP_SETUP": "1"}
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if not line.startswith("[setup]")]
    assert done.returncode == 2, done
    assert len(errors) == 1 and errors[0].startswith("error: "), done.stderr
    assert not (tmp_path / "airflow").exists(), "nothing is started or written on bad input"
    assert not (tmp_path / "s3").exists(), "nothing is started or written on bad input"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("stop", os.fsdecode(b"\xff\xfe")), r"argument '\xff\xfe' is not UTF-8 text"),  # pyarrow's traceback before
        (("stream", "create", "s", "--partitions", "1", "--home", os.fsdecode(b"q\xff")), r"argument 'q\xff'"),
        (("stop", ""), "job name '' is invalid"),  # run and stop reached the tables with any name
        # stored with the new model and in the run's conf whatever it held (core.limits.check_reason)
        (("rescale", "j", "--factor", "2", "--dry-run", "--reason", "x" * 600), "reason has 600 characters"),
        (("model", "plan", "--save", "--reason", "a\tb"), "reason holds a tab (U+0009) at character 2"),
        # Commands that would start Spark had they not been refused: the fast tier's guard cannot tell.
        pytest.param(("sql", os.fsdecode(b"select '\xff'")), "is not UTF-8 text", marks=pytest.mark.slow),
        pytest.param(("run", "a/b"), "job name 'a/b' is invalid", marks=pytest.mark.slow),
        pytest.param(  # after the demo had wiped its home
            ("demo", "--seconds", "1e300"), "must be at most 316,224,000 seconds", marks=pytest.mark.slow
        ),
        pytest.param(  # after the rescale had activated its new model
            ("rescale", "j", "--factor", "2", "--master", "local[99999999999]"),
            "holds a number above 2,147,483,647",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_what_the_tables_or_spark_cannot_take_is_refused_before_anything_is_written(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    assert said in fails(tmp_path, *args)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a refused command wrote nothing, no home either"


def test_a_home_from_the_environment_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    home = os.fsdecode(bytes(tmp_path) + b"/q\xff")  # deltalake's traceback, and a half-made stream folder, before
    env = {"PIPELINES_HOME": home}
    argv = [sys.executable, "-m", "pipelines", "stream", "create", "s", "--partitions", "1"]
    done = subprocess.run(argv, cwd=tmp_path, env={**os.environ, **env, "PYTHONPATH": str(REPO)}, capture_output=True)
    assert done.returncode == 2 and done.stderr.decode() == (
        f"error: $PIPELINES_HOME '{tmp_path}/q\\xff' is not UTF-8 text: a home's path must be\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


SLOWED = """
import os, pathlib, sys, time

import deltalake

marker = pathlib.Path(os.environ["SLOWED_MARKER"])
real_write, real_commit = pathlib.Path.write_bytes, deltalake.DeltaTable.create_write_transaction


def slow_write(self, data):
    # a slow disk under the home's temporary files: each takes half a second, so a signal lands mid-write
    if os.environ["SLOWED"] != "write" or not self.name.endswith(".tmp"):
        return real_write(self, data)
    with self.open("wb") as file:
        step = max(1, len(data) // 5)
        for start in range(0, len(data), step):
            file.write(data[start : start + step])
            file.flush()
            marker.touch()
            time.sleep(0.1)
    return len(data)


def slow_commit(self, *args, **kwargs):
    # a signal that arrived during delta-rs's commit is handled at the first Python step after it returns
    done = real_commit(self, *args, **kwargs)
    if os.environ["SLOWED"] == "commit":
        marker.touch()
        time.sleep(0.5)
    return done


pathlib.Path.write_bytes = slow_write
deltalake.DeltaTable.create_write_transaction = slow_commit
from pipelines.cli import main

raise SystemExit(main(sys.argv[1:]))
"""


def _signalled(
    argv: list[str], cwd: Path, env: dict[str, str], marker: Path, signal_number: int
) -> tuple[int, str, str]:
    """Start ``argv``, send it ``signal_number`` once it has touched ``marker`` (it is then in its slowed step), and
    return its exit code, stdout and stderr."""
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and process.poll() is None:
            assert time.monotonic() < deadline, f"{argv[3:]} reached no slowed step within a minute"
            time.sleep(0.005)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal_number)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, out, err


@pytest.mark.parametrize("where", ["write", "commit"])
@pytest.mark.parametrize(
    ("signal_number", "code", "said"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_a_produce_ended_by_a_signal_leaves_no_temporary_file_and_every_commit_readable(
    tmp_path: Path, where: str, signal_number: int, code: int, said: str
) -> None:
    """``stream produce --records <huge>`` killed (SIGTERM: a CI limit, ``timeout``, a stopped service) or
    interrupted (Ctrl-C) while it rewrote its per-key sequence file left ``.events.json.<uuid>.tmp`` in the home
    for good; one interrupted just after a commit returned removed that commit's files, and the stream could no
    longer be read. It now ends with its signal's exit code, nothing half-written, every commit readable, and
    the per-key sequences a next produce continues."""
    run(tmp_path, "stream", "create", "events", "--partitions", "2")
    home = Home(tmp_path / "home")
    marker = tmp_path / "slowed"
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    env |= {"PYTHONPATH": str(REPO), "SLOWED": where, "SLOWED_MARKER": str(marker)}
    argv = [sys.executable, "-c", SLOWED, "--home", str(home.root), "stream", "produce", "events"]
    argv += ["--records", str(10**12), "--keys", "7", "--seed", "1", "--chunk", "40"]
    returncode, out, err = _signalled(argv, tmp_path, env, marker, signal_number)
    assert returncode == code, (returncode, err)
    assert "Traceback" not in err and err.splitlines()[-1] == said, err
    assert out == ""
    assert [p.name for p in home.root.local_path().rglob("*.tmp")] == []
    log = DeltaLog(home.streams)
    seqs: dict[str, list[int]] = defaultdict(list)
    for p, meta in log.describe("events").partitions.items():
        for raw in log.read_range("events", p, 0, int(meta.end)).column("value").to_pylist():
            doc = json.loads(raw)
            seqs[doc["key"]].append(doc["seq"])
    # after a commit, at least its chunk; the sequence file is written once, before the first chunk
    assert sum(len(s) for s in seqs.values()) >= (40 if where == "commit" else 0)
    assert all(sorted(s) == list(range(len(s))) for s in seqs.values()), seqs
    more = json.loads(run(tmp_path, "--json", "stream", "produce", "events", "--records", "7", "--keys", "7").stdout)
    assert more["records"] == 7


def test_a_compaction_interrupted_just_after_its_commit_keeps_every_record(tmp_path: Path) -> None:
    """The merged file was deleted when Ctrl-C (or now SIGTERM) was raised right after its commit returned: the
    log then named a missing file in place of the ones it merged, and the stream could not be read."""
    run(tmp_path, "stream", "create", "events", "--partitions", "1")
    for _ in range(3):
        run(tmp_path, "stream", "produce", "events", "--records", "20", "--keys", "3")
    home = Home(tmp_path / "home")
    marker = tmp_path / "slowed"
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    env |= {"PYTHONPATH": str(REPO), "SLOWED": "commit", "SLOWED_MARKER": str(marker)}
    argv = [sys.executable, "-c", SLOWED, "--home", str(home.root), "stream", "compact", "events"]
    returncode, _, err = _signalled(argv, tmp_path, env, marker, signal.SIGINT)
    assert returncode == 130 and err.splitlines()[-1] == "interrupted", err
    log = DeltaLog(home.streams)
    assert log.describe("events").partitions[0].end == "60"
    assert log.read_range("events", 0, 0, 60).num_rows == 60
    assert "merged" in run(tmp_path, "stream", "compact", "events").stdout  # and the next compaction works
