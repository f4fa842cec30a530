"""The fault matrix's scenarios: crash a job or an operation at a named point, recover as a user would, prove it.

Each scenario builds a job on the embedded log in a home of its own (the
operations' scenarios copy one ran-to-the-end factor-1 home built once per
process, the common start every rescale and expansion needs), runs the CLI
in a session of its own with ``PIPELINES_FAULT=kill:POINT@N`` (a SIGKILL of
the whole session at the N-th pass of the point: driver, JVM and Python
workers, or the operation and its children), checks the kill happened, then
recovers the way an operator would: the same CLI command again, then
``pipelines run --available-now`` to drain (after an operation, only when
its repeat left the job short of the stream's end: a repeated rescale of a
stopped job catches up itself, and a run that reads nothing proves nothing
the verdict does not). The verdict compares the sink
with the records the stream holds (an oracle independent of the platform's
own verifier, which is also run): lost, duplicated, per-key order, a lock
left behind, unfinished scaling events, and whether the active model is in
force (its checkpoints cover every task and reach the stream's end).

Shared by ``test_fault_matrix.py`` (each point once, in CI) and
``matrix.py`` (each point N times with random kill moments, a table).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.adjunct.inspect import verify_store
from pipelines.control import ControlPlane
from pipelines.control.locks import ScalingLock
from pipelines.deltaio import read_delta
from pipelines.demo.enrich import CUSTOMERS
from pipelines.faults import FAULT_DIR_ENV, FAULT_ENV
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.quality.report import run_quality
from pipelines.runtime.session import spark_env
from pipelines.state.inspect import state_at
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.faults import stateful

REPO = Path(__file__).resolve().parents[2]
DEMO_JOB = REPO / "include" / "jobs" / "enrichment.yaml"
JOB = "faulty"
STREAM = "events"
KEYS = 24
RECORDS = 480  # per production round
MAX_RECORDS = 60  # per batch at factor 1 (times the factor): several batches per run
MASTER = "local[2]"
COMMAND_TIMEOUT_S = 420.0


@dataclass
class Outcome:
    """One crash and its recovery, as the matrix's table row counts it."""

    point: str
    scenario: str
    nth: int
    killed: bool
    lost: int
    duplicated: int
    order_violations: int
    lock_left: str | None
    unfinished_events: int
    model_in_force: bool
    verify_exit: int
    recovery_s: float
    problems: list[str] = field(default_factory=list)
    at_crash: dict[str, int] = field(default_factory=dict)
    """What a driver's crash left (runtime scenarios): the sink's rows and the last batch checkpointed (-1: none)."""

    @property
    def ok(self) -> bool:
        return not self.problems


class Producer:
    """Keyed JSON records with a per-key sequence that continues across rounds (the order oracle)."""

    def __init__(self, home: Home) -> None:
        self.log = DeltaLog(home.streams)
        self.seq: dict[str, int] = {}
        self.produced = 0

    def round(self, records: int = RECORDS) -> None:
        batch = []
        for i in range(records):
            key = f"key-{i % KEYS}"
            n = self.seq.get(key, 0)
            self.seq[key] = n + 1
            value = {"key": key, "seq": n, "amount": i % 7 + 1, "payload": str(i)}
            batch.append((key.encode(), json.dumps(value).encode(), None))
        self.log.produce(STREAM, batch)
        self.produced += records


class Scenario:
    """A home with one job; the CLI run against it the way an operator would."""

    def __init__(
        self,
        root: Path,
        factor: int,
        *,
        log: Callable[[str], None] = lambda m: None,
        store: bool = False,
        copy_of: Scenario | None = None,
    ) -> None:
        self.home = Home(root)
        self.say = log
        # this scenario's own counter files: a crash run beside it (another pytest worker) can neither read nor
        # remove them
        self.counters = root.parent / f"{root.name}-fault-counters"
        self.counters.mkdir(parents=True, exist_ok=True)
        if copy_of is not None:  # the same home, copied: a home holds no absolute path, so it runs where it lands
            shutil.copytree(copy_of.home.root, root)
            self.producer = Producer(self.home)
            self.producer.seq, self.producer.produced = dict(copy_of.producer.seq), copy_of.producer.produced
            self.config = copy_of.config
            return
        DeltaLog(self.home.streams).create(STREAM, 2)
        self.producer = Producer(self.home)
        base = JobConfig.load(DEMO_JOB).to_dict()
        base.pop("stores", None)  # the store scenario adds its own
        base.update(
            name=JOB,
            inputs=[{"system": "deltalog", "stream": STREAM}],
            elasticity_factor=factor,
            process_options={"latency_ms": 0},
            process="tests.faults.stateful:process",
            output_schema=base["output_schema"] + stateful.OUTPUT,
            state=stateful.STATE,
            sink={"table": f"{JOB}_out"},
            dead_letter={"table": f"{JOB}_dead"},
            batch={"max_records": MAX_RECORDS, "trigger_interval": "0 seconds"},
        )
        if store:  # the demo's customer table, looked up through an adjunct store fed by its change stream
            DeltaLog(self.home.streams).create(CUSTOMERS, 1)
            base["stores"] = {CUSTOMERS: {"input": CUSTOMERS, "partitioning": "broadcast", "bootstrap": True}}
            base["output_schema"] += ", customer STRING"
        self.config = JobConfig.from_dict(base)
        create_job(self.home, self.config)

    def name_customers(self, suffix: str) -> None:
        """One change per key of the customer table: every key's name becomes ``customer key-K{suffix}``."""
        names = [(f"key-{k}".encode(), f"customer key-{k}{suffix}".encode(), None) for k in range(KEYS)]
        DeltaLog(self.home.streams).produce(CUSTOMERS, names)

    # ------------------------------------------------------------------ the CLI, as a user runs it

    def cli(self, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        """``python -m pipelines --home H ARGS`` in a session of its own (a kill takes exactly that session)."""
        env = {**spark_env(), "PIPELINES_SPARK_MASTER": MASTER}
        env.pop(FAULT_ENV, None)
        env[FAULT_DIR_ENV] = str(self.counters)
        if fault:
            env[FAULT_ENV] = fault
        cmd = [sys.executable, "-m", "pipelines", "--home", str(self.home.root), *args]
        self.say(f"$ {'PIPELINES_FAULT=' + fault + ' ' if fault else ''}pipelines {' '.join(args)}")
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            out, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            took = f"{COMMAND_TIMEOUT_S:.0f}s"
            raise AssertionError(f"pipelines {' '.join(args)} did not finish in {took}: {err[-2000:]}") from None
        finally:
            # The point may be passed in a session the command started (a foreground driver runs in its own):
            # every counter file this command left shows how often its point was passed, whoever passed it.
            self.passes = 0
            for path in self.counters.glob("pipelines-fault-*"):
                self.passes = max(self.passes, path.stat().st_size)
                path.unlink(missing_ok=True)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def run_to_end(self) -> None:
        done = self.cli("run", JOB, "--available-now", "--master", MASTER)
        assert done.returncode == 0, f"run --available-now failed ({done.returncode}): {done.stderr[-3000:]}"

    def crash(self, fault: str, *args: str) -> bool:
        """Run ``args`` with the fault; True if it was killed at the point (the command then failed).

        The kill takes the session that passed the point: the CLI's own for an
        operation (it dies with SIGKILL, its children with it), the driver's for
        a run (the CLI then reports the driver's exit and fails).
        """
        done = self.cli(*args, fault=fault)
        nth = int(fault.partition("@")[2] or 1)
        if done.returncode != 0 and self.passes >= nth:
            return True
        if done.returncode != 0:
            raise AssertionError(f"{args} failed without being killed ({done.returncode}): {done.stderr[-3000:]}")
        return False

    def at_crash(self) -> dict[str, int]:
        """Where the crash left the job: which side of the first commit, of the sink and of the checkpoints, it hit."""
        rows = read_delta(self.home.sinks / self.config.sink_table, columns=["offset"]).num_rows
        batch = ControlPlane(self.home).checkpoints.latest_batch(JOB, 1)
        return {"sink_rows": rows, "checkpointed_batch": -1 if batch is None else int(batch)}

    # ------------------------------------------------------------------ the verdict

    def outcome(
        self,
        point: str,
        scenario: str,
        nth: int,
        killed: bool,
        recovery_s: float,
        at_crash: dict[str, int] | None = None,
    ) -> Outcome:
        control = ControlPlane(self.home)
        rows = read_delta(self.home.sinks / self.config.sink_table).to_pandas()
        produced = _stream_records(self.home)
        seen = set(zip(rows["partition"], rows["offset"].astype(str), strict=True))
        lost = len(produced - seen)
        duplicated = int(rows.duplicated(["partition", "offset"]).sum())
        order = _order_violations(rows)
        lock = ScalingLock(self.home).state(JOB)
        lock_left = lock.describe() if lock is not None and lock.held else None
        unfinished = sum(1 for e in control.events.history(JOB) if e.finished_at is None)
        in_force, why = _model_in_force(self.home, control)
        # the platform's own verifier, in this process: what `pipelines verify` runs, without a fresh interpreter
        # importing Great Expectations (4-5 s) for each point
        quality = run_quality(self.home, JOB, None, sequence="seq")
        verify_exit = 0 if quality.success else 1
        store_problems = self._store_problems(rows) if "customer" in rows.columns else []
        state_problems = _state_problems(self.home, self.config)
        problems = (
            [
                text
                for bad, text in (
                    (not killed, f"the fault {point}@{nth} never fired: nothing was tested"),
                    (lost, f"{lost} records lost"),
                    (duplicated, f"{duplicated} records duplicated in the sink"),
                    (order, f"{order} per-key order violations"),
                    (lock_left, f"a scaling lock was left behind: {lock_left}"),
                    (unfinished, f"{unfinished} scaling events left unfinished"),
                    (not in_force, f"the active model is not in force: {why}"),
                    (verify_exit != 0, f"pipelines verify fails: {quality.summary()[-1500:]}"),
                )
                if bad
            ]
            + store_problems
            + state_problems
        )
        return Outcome(
            point, scenario, nth, killed, lost, duplicated, order, lock_left, unfinished, in_force,
            verify_exit, recovery_s, problems, at_crash or {},
        )  # fmt: skip

    def _store_problems(self, rows: Any) -> list[str]:
        """The store holds the change stream's latest names, and every event was enriched with a name of its key."""
        problems = []
        verdict = verify_store(self.home, JOB, CUSTOMERS, sample=KEYS)
        if not verdict.success or verdict.checked == 0:
            problems.append(f"store {CUSTOMERS}: {verdict}")
        names = {f"customer {k}": k for k in rows["event_key"].unique()}
        names.update({f"customer {k} (renamed)": k for k in rows["event_key"].unique()})
        wrong = rows[[names.get(n) != k for n, k in zip(rows["customer"], rows["event_key"], strict=True)]]
        if len(wrong):
            example = wrong.iloc[0][["event_key", "customer"]].to_dict()
            problems.append(f"{len(wrong)} events enriched with another key's name or none, e.g. {example}")
        return problems


def _stream_records(home: Home) -> set[tuple[int, str]]:
    log = DeltaLog(home.streams)
    table = read_delta(log.path(STREAM), columns=["partition", "offset"]).to_pandas()
    return set(zip(table["partition"], table["offset"].astype(str), strict=True))


def _state_problems(home: Home, config: JobConfig) -> list[str]:
    """Every key's state is the fold of its records in the stream (events, amounts, last seq, records applied)."""
    log = DeltaLog(home.streams)
    records = read_delta(log.path(STREAM), columns=["key", "value"]).to_pylist()
    folds: dict[bytes, list[int]] = {}
    for r in records:
        event = json.loads(r["value"])
        fold = folds.setdefault(r["key"], [0, 0, -1])
        fold[0] += 1
        fold[1] += int(event["amount"])
        fold[2] = max(fold[2], int(event["seq"]))
    rows = {r["key"]: r for r in state_at(home, JOB, config.state[0], None).to_pylist()}
    problems = []
    for key, (events, amount, last) in sorted(folds.items()):
        row = rows.get(key)
        got = None if row is None else (row["events"], row["amount"], row["last_seq"], row["_records"])
        if got != (events, amount, last, events):
            problems.append(
                f"key {key.decode()}: state {got}, the fold of its records {(events, amount, last, events)}"
            )
    extra = sorted(set(rows) - set(folds))
    if extra:
        problems.append(f"state rows for {len(extra)} keys the stream never held, e.g. {extra[0]!r}")
    return problems[:5]


def _order_violations(rows: Any) -> int:
    """Pairs of consecutive records of a key, in the order the sink committed them, whose seq goes backwards."""
    bad = 0
    ordered = rows.sort_values(["model_version", "batch_id", "task_seq"])
    for _key, group in ordered.groupby("event_key", sort=False):
        bad += sum(1 for a, b in itertools.pairwise(group["seq"].tolist()) if b <= a)
    return bad


def _model_in_force(home: Home, control: ControlPlane) -> tuple[bool, str]:
    """The active model's own checkpoints cover every one of its key buckets and reach each partition's end."""
    model = control.job_models.active(JOB)
    latest = control.job_models.latest_version(JOB)
    if latest != model.version and control.job_models.active_version(JOB) != model.version:
        return False, f"v{model.version} is active but v{latest} is the latest"
    checkpoints = control.checkpoints.latest(JOB, model.version)
    if checkpoints is None or control.checkpoints.latest_batch(JOB, model.version) in (None, -1):
        return False, f"v{model.version} has committed no batch"
    ends = DeltaLog(home.streams).end_offsets(STREAM)
    expected = {ssp for task in model.tasks() for ssp in task.ssps}
    missing = expected - set(checkpoints.offsets)
    if missing:
        return False, f"v{model.version} has no checkpoint for {len(missing)} of its key buckets"
    behind = {str(s): o for s, o in checkpoints.offsets.items() if int(o) != ends[s.partition]}
    if behind:
        return False, f"v{model.version}'s checkpoints are behind the stream's end: {behind}"
    if model.partitions() and max(model.partitions().values()) != len(ends):
        return False, f"v{model.version} reads {model.partitions()} partitions, the stream has {len(ends)}"
    return True, ""


# ---------------------------------------------------------------------------------------------------- scenarios

Run = Callable[[Path, random.Random | None, Callable[[str], None]], Outcome]


def runtime_crash(point: str, passes: int, once: int) -> Run:
    """Kill the driver at the N-th pass of ``point`` in a run, then run the job again to the end.

    N is random up to ``passes`` when repeated (``matrix.py``), ``once`` when run once (CI): the pass whose crash
    ``test_fault_matrix.py`` holds to a place (``Outcome.at_crash``).
    """

    def run(root: Path, rng: random.Random | None, log: Callable[[str], None]) -> Outcome:
        s = Scenario(root, factor=2, log=log)
        s.producer.round()
        nth = rng.randint(1, passes) if rng else once
        killed = s.crash(f"kill:{point}@{nth}", "run", JOB, "--available-now", "--master", MASTER)
        at_crash = s.at_crash()
        t0 = time.monotonic()
        s.run_to_end()
        return s.outcome(point, "driver run", nth, killed, time.monotonic() - t0, at_crash)

    return run


_RAN_V1: dict[str, Scenario] = {}
"""The operations' common start, built once per process: a factor-1 job that has run one round to its end."""


def _ran_v1(log: Callable[[str], None]) -> Scenario:
    """What every operation scenario starts from: v1 has committed checkpoints to migrate from.

    Built once per process and copied into each scenario's home (a Spark run saved, 14-20 s per point): the
    crash and everything after it happen in the copy.
    """
    if "v1" not in _RAN_V1:
        root = Path(tempfile.mkdtemp(prefix="pipelines-fault-v1-")) / "home"
        atexit.register(shutil.rmtree, root.parent, ignore_errors=True)
        s = Scenario(root, factor=1, log=log)
        s.producer.round()
        s.run_to_end()
        _RAN_V1["v1"] = s
    return _RAN_V1["v1"]


def operation_crash(point: str, kind: str) -> Run:
    """Kill a rescale or an expansion's absorption at ``point``, then repeat the command and drain what it left."""

    def run(root: Path, rng: random.Random | None, log: Callable[[str], None]) -> Outcome:
        s = Scenario(root, factor=1, log=log, copy_of=_ran_v1(log))
        if kind == "expansion":
            done = s.cli("stream", "expand", STREAM, "--partitions", "4")
            assert done.returncode == 0, done.stderr
            command: tuple[str, ...] = ("watch", "--apply", "--master", MASTER)
        else:
            command = ("rescale", JOB, "--factor", "4", "--master", MASTER)
        s.producer.round()  # records the crashed operation leaves behind
        chosen = point if point != "any" else rng.choice(OPERATION_POINTS) if rng else "after_migrate"
        killed = s.crash(f"kill:{chosen}", *command)
        t0 = time.monotonic()
        again = s.cli(*command)
        assert again.returncode == 0, f"the repeated {command[0]} failed ({again.returncode}): {again.stderr[-3000:]}"
        in_force, behind = _model_in_force(s.home, ControlPlane(s.home))
        if in_force:  # the repeat caught the job up itself (a rescale of a stopped job runs to the inputs' ends)
            s.say("nothing left to drain: the active model's checkpoints reach the stream's end")
        else:
            s.say(f"draining: {behind}")
            s.run_to_end()
        return s.outcome(chosen, kind, 1, killed, time.monotonic() - t0)

    return run


def store_crash(root: Path, rng: random.Random | None, log: Callable[[str], None]) -> Outcome:
    """Kill the driver right after a store committed a version no batch has committed: at its bootstrap, then
    again at the ingest of renames while the job has committed batches; each time run the job again."""
    s = Scenario(root, factor=2, log=log, store=True)
    s.name_customers("")
    s.producer.round()
    killed = s.crash("kill:store_switch@1", "run", JOB, "--available-now", "--master", MASTER)
    t0 = time.monotonic()
    s.run_to_end()
    recovery = time.monotonic() - t0
    s.name_customers(" (renamed)")
    s.producer.round()
    killed = s.crash("kill:store_switch@1", "run", JOB, "--available-now", "--master", MASTER) and killed
    t0 = time.monotonic()
    s.run_to_end()
    return s.outcome("store_switch", "adjunct store", 1, killed, max(recovery, time.monotonic() - t0))


OPERATION_POINTS = ("mid_migration", "after_migrate", "during_switch")

SCENARIOS: dict[str, Run] = {
    # mid_batch: 4 tasks x 4 batches or more per run; once: a task of the second batch, the first committed
    "mid_batch": runtime_crash("mid_batch", passes=12, once=6),
    # after_sink_commit: 4 batches or more per run; once: the first batch's rows in the sink, its state changes
    # and checkpoints not yet (the batch's manifest commits the first run's state changes at the replay)
    "after_sink_commit": runtime_crash("after_sink_commit", passes=3, once=1),
    # mid_state_write: a task wrote its state changes, nothing of its batch committed; once: the second batch's
    "mid_state_write": runtime_crash("mid_state_write", passes=12, once=6),
    # after_state_commit: the first batch's sink rows and state changes committed, no checkpoint yet
    "after_state_commit": runtime_crash("after_state_commit", passes=3, once=1),
    # mid_state_compaction: the run's compaction (every minute, and once at its end) wrote its files, not committed
    "mid_state_compaction": runtime_crash("mid_state_compaction", passes=2, once=1),
    "mid_migration": operation_crash("mid_migration", "rescale"),
    "after_migrate": operation_crash("after_migrate", "rescale"),
    "during_switch": operation_crash("during_switch", "rescale"),
    "during_expansion": operation_crash("any", "expansion"),
    "store_switch": store_crash,
}
"""Point of the issue's matrix -> scenario: (a) mid_batch, (b) after_sink_commit, (c) mid_migration,
(d) after_migrate, (e) during_switch, (f) during_expansion (a random operation point when repeated),
(g) store_switch; and the state's own: mid_state_write, after_state_commit, mid_state_compaction. Every scenario's
job keeps state (``stateful``), so every point is judged on it too."""
