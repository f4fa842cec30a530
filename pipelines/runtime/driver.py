"""The job driver: runs a job's active model as a streaming query, and switches models without a restart.

``python -m pipelines.runtime.driver --home H --job J [--available-now] [--master M]``
is what ``pipelines run`` hands to spark-submit. A continuous driver polls the
control plane between batches: when another model version is activated it
stops its query at a batch boundary and starts a query on the new model in the
same Spark application (no JVM or Python-worker start), and a stop request
(``pipelines stop``) ends it the same way. Each model version has its own Spark
checkpoint location; offsets cross versions through the checkpoints table.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar

from pipelines.control import ControlPlane
from pipelines.control.compaction import compact_job, summary
from pipelines.control.drivers import Registration
from pipelines.core.durations import spark_interval
from pipelines.core.faults import EXECUTORS_LOST, TASKS_FAILED, FaultLedger, Faults, JobSeen
from pipelines.core.metric_names import DURATION
from pipelines.core.model import JobModel
from pipelines.errors import PipelinesError, raised_inside
from pipelines.jobs.config import job_config
from pipelines.jobs.output_schema import parse_output_schema
from pipelines.planning import carry_forward_on_start
from pipelines.runtime import requests, schemas
from pipelines.runtime.gate import READY_S, WAIT_S, Gate
from pipelines.runtime.lifetime import die_with_parent
from pipelines.runtime.outage import STALL_S, record_outage
from pipelines.runtime.outputs import ensure_output_tables
from pipelines.runtime.switch_timeline import SwitchTimeline
from pipelines.storage.home import Home, resolve_home
from pipelines.usage import Parser

POLL_S = 0.25
HEARTBEAT_S = 10.0
STUCK_S = 300.0  # the driver's loop not round for this long: no more beats (the longest stop at a boundary is 60 s)
COMPACT_S = 600.0
"""How often the heartbeat thread compacts the job's control-table files (``control.compaction``): a running job adds
a few every batch and beat, and every read and append of a table pays for each file it has."""
LAST_ROUND_WAIT_S = 60.0
"""How long a run that ends waits for a round its heartbeat thread has under way before it runs its own."""

T = TypeVar("T")


def batch_budget(max_records: int, factor: int) -> int:
    """Records admitted per micro-batch: ``batch.max_records`` is the budget at factor 1, scaled by the factor.

    A micro-batch has a fixed cost (planning, offset log, sink and checkpoint
    commits) while each virtual task's share of a fixed budget shrinks as the
    factor grows; without the scaling, a rescale up adds tasks but not
    throughput. Scaled, every virtual task gets the same share at any factor.
    """
    return max_records * factor


def start_query(spark: Any, home: Home, model: JobModel, *, available_now: bool, gate: str | None = None) -> Any:
    """The model's streaming query, started; ``gate``: a query started ahead of a switch (``runtime.gate``)."""
    from pipelines.runtime.session import register_sources

    # Spark resolves Python streaming sinks through the calling thread's active session, which a thread
    # other than the one that built the session (an operator's, a test's) does not have.
    jvm_session = getattr(spark, "_jsparkSession", None)
    if jvm_session is not None:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(jvm_session)
    register_sources(spark)
    config = job_config(model)
    output = parse_output_schema(config.output_schema)
    ensure_output_tables(home, config, output)
    reader = (
        spark.readStream.format("elastic")
        .option("home", str(home.root))
        .option("job", model.job_name)
        .option("modelVersion", str(model.version))
        .option("maxRecords", str(batch_budget(config.max_records_per_batch, model.elasticity_factor)))
        .options(**({"gate": gate} if gate is not None else {}))
        .load()
    )
    # The source hands each virtual task's TaskRange to the sink's writer, which reads the records, runs the
    # user's function and writes parquet in one Python worker (runtime.reading): a record that crossed the JVM
    # (Arrow -> rows -> Arrow) between a Python source, a mapInArrow step and a Python writer cost a cheap job
    # more CPU than its processing. So Spark's numInputRows counts virtual tasks, not records.
    writer = (
        reader.writeStream.format("elastic_delta")
        .queryName(f"{model.job_name}-v{model.version}")
        .option("checkpointLocation", home.spark_checkpoint_uri(model.job_name, model.version))
        .option("home", str(home.root))
        .option("job", model.job_name)
        .option("modelVersion", str(model.version))
        .option("factor", str(model.elasticity_factor))
        .option("taskCount", str(model.task_count))
        .option("systems", json.dumps(config.systems, sort_keys=True))
        .option("sinkPath", str(home.sinks / config.sink_table))
        .option("deadLetterPath", str(home.sinks / config.dead_letter_table))
        .option("process", config.process)
        .option("processOptions", json.dumps(dict(config.process_options), sort_keys=True))
        .option("outputSchema", schemas.to_json(output))
        .option("stores", "true" if config.stores else "false")
        .option("state", json.dumps([s.to_dict() for s in config.state]))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:  # whole milliseconds, whichever form the job's YAML wrote (core.durations)
        writer = writer.trigger(processingTime=spark_interval(config.trigger_interval))
    return writer.start()


def run_job(
    spark: Any,
    home: Home,
    job: str,
    *,
    available_now: bool,
    progress: Callable[[str], None] = print,
    max_seconds: float | None = None,
) -> int:
    """Run until done (available-now), stopped, or ``max_seconds``; returns the number of queries run."""
    control = ControlPlane(home)
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    queries = 0
    control.job_models.active(job)  # an unknown job fails here, before it is registered as a driver
    registration = Registration(home, job, **_spark_identity(spark))
    registration.start()
    heartbeat = Heartbeat(control, job, registration)
    compactor = _state_compactor(control, job, progress)
    watch = HomeWatch(home, job) if not home.is_local else None
    if watch is not None:
        watch.start()
    timeline: SwitchTimeline | None = None  # the switch into the next query, after the first
    ahead: list[_Ahead] = []  # the next model's query, started gated while the old one finished its last batch
    gate: Gate | None = None  # the gate the running query came through, removed once it ended

    def start_ahead(version: int) -> None:
        if not available_now:
            ahead.extend(_start_ahead(spark, home, job, version, progress))

    try:
        while True:
            model = control.job_models.active(job)
            heartbeat.version, heartbeat.batch = model.version, -1
            if watch is not None:
                watch.version = model.version
            heartbeat.ensure_started()
            _carry_forward_on_start(control, model, progress)
            # A drain request of this version can only be a killed driver's (killed while it stopped at a batch
            # boundary: a second Ctrl-C, a stop that took too long): left there, it would admit no record ever.
            requests.undrain(home, job, model.version)
            if timeline is not None:
                timeline.carried = time.time()
            started = time.monotonic()
            waiting = ahead.pop() if ahead else None
            if waiting is not None and waiting.version == model.version:
                query, gate = waiting.go(), waiting.gate
            else:
                if waiting is not None:  # another version became active than the one started ahead
                    waiting.cancel(job)
                query = start_query(spark, home, model, available_now=available_now)
            if timeline is not None:
                timeline.started, timeline.ahead = time.time(), gate is not None
            _lifecycle(control, model, "query_started")
            queries += 1
            progress(
                f"[{job}] model v{model.version}: factor {model.elasticity_factor}, {model.task_count} virtual tasks"
            )
            faults = SparkFaults.of(spark, query)
            stopped = _supervise(
                query, control, job, model, deadline, progress, started, heartbeat, faults, timeline, start_ahead
            )
            if gate is not None:
                gate.remove()
                gate = None
            timeline = None if stopped is None else SwitchTimeline(stopped)
            if stopped is None:
                requests.clear_stop(home, job)
                heartbeat.halt.set()
                if compactor is not None:
                    compactor.last_round()
                registration.end(model_version=heartbeat.version, batch_id=heartbeat.batch)
                heartbeat.last_round()
                return queries
    except BaseException as e:
        heartbeat.halt.set()
        registration.end(f"{type(e).__name__}: {e}", model_version=heartbeat.version, batch_id=heartbeat.batch)
        raise
    finally:
        for waiting in ahead:  # started ahead of a switch that did not happen (the old query failed to stop)
            waiting.cancel(job)
        if gate is not None:
            gate.remove()
        heartbeat.halt.set()
        if compactor is not None:
            compactor.halt.set()
        if watch is not None:
            watch.halt.set()


def _state_compactor(control: ControlPlane, job: str, progress: Callable[[str], None]) -> Any:
    """The thread that compacts the job's keyed states while it runs (None for a job that keeps none)."""
    if not job_config(control.job_models.active(job)).state:
        return None
    from pipelines.state.compactor import StateCompactor

    compactor = StateCompactor(control, job, progress)
    compactor.start()
    return compactor


class HomeWatch(threading.Thread):
    """Whether an object-store home answers: one small read a second, from a thread of its own.

    A store that stops answering holds every call of the job up (planning,
    reads, commits, the heartbeat), each in its own process and with its own
    client's timeouts, and the job waits it out: nothing fails, so nothing
    would say so. This thread asks the store for one small object every
    ``every_s``; an answer that takes longer than ``STALL_S`` (or does not
    come) opens an outage, the next prompt answer ends it, and the outage is
    recorded like an input's (``record_outage``), so the views mark it.
    """

    def __init__(self, home: Home, job: str, every_s: float = 1.0) -> None:
        super().__init__(name=f"home-watch-{job}", daemon=True)
        self.home, self.job, self.every_s = home, job, every_s
        self.version = 0
        self.halt = threading.Event()
        self.down_since: float | None = None

    def run(self) -> None:
        from pipelines.storage.conditional import MARKER

        probe = self.home.root / MARKER
        while not self.halt.wait(self.every_s):
            asked = time.monotonic()
            try:
                self.home.store.exists(probe)
                answered = time.monotonic() - asked <= STALL_S
            except Exception:  # refused, timed out: down
                answered = False
            if not answered and self.down_since is None:
                self.down_since = asked
            elif answered and self.down_since is not None:
                lasted, self.down_since = time.monotonic() - self.down_since, None
                record_outage(self.home, self.job, self.version, lasted, "the home's store")


class _SparkIdentity(TypedDict):
    app_id: str | None
    master: str | None


def _spark_identity(spark: Any) -> _SparkIdentity:
    """The Spark application this driver runs in, as the drivers table names it."""
    try:
        context = spark.sparkContext
        return {"app_id": str(context.applicationId), "master": str(context.master)}
    except Exception:  # a session without a context (Spark Connect): the host and pid still name the driver
        return {"app_id": None, "master": None}


class Heartbeat(threading.Thread):
    """The driver's sign of life, every ``HEARTBEAT_S`` from a thread of its own for the driver's whole life.

    A scaling step decides from the heartbeat's age whether a driver died
    (then the new model gets a catch-up run). Beating from the loop that
    watches the query stopped the beats exactly while a driver was busiest:
    stopping a query at a batch boundary and starting the next one took over
    35 s on a loaded machine, the step took the live driver for dead, and
    its catch-up run started a second query on the same checkpoint (Spark's
    CONCURRENT_STREAM_LOG_UPDATE). Kafka's consumers beat from a background
    thread for the same reason (KIP-62), and like their
    ``max.poll.interval.ms`` the beats stop when the driver's own loop has
    not come round for ``STUCK_S`` (a JVM that hangs a py4j call): a driver
    stuck that long is dead to the scaling steps and the keepalive.

    Each beat is a row of the driver's registration in the ``drivers`` table
    (host, pid, application, model version, last batch, and the store's time:
    what the scaling steps, the keepalive, ``pipelines stop`` and operators
    read) and a ``heartbeat`` metric row (its value this host's wall time, for
    the plots; a query's start, which the autosizer skips, is its batch -1).
    """

    def __init__(self, control: ControlPlane, job: str, registration: Registration | None = None) -> None:
        super().__init__(name=f"heartbeat-{job}", daemon=True)
        self.control, self.job = control, job
        self.registration = registration
        self.version = 0
        self.batch = -1
        self.halt = threading.Event()
        self.touched = time.monotonic()
        self.compacted = time.monotonic()

    def progress(self) -> None:
        """The driver's loop came round: it is not stuck."""
        self.touched = time.monotonic()

    def ensure_started(self) -> None:
        self.progress()
        if not self.is_alive():
            self.beat()  # at once: a scaling step may be looking
            self.start()

    def run(self) -> None:
        while not self.halt.wait(HEARTBEAT_S):
            if time.monotonic() - self.touched <= STUCK_S:
                self.beat()
                if time.monotonic() - self.compacted >= COMPACT_S:
                    self.compact()

    def last_round(self) -> None:
        """One compaction round when the run ends on its own terms (its input's end, a stop), after any round the
        thread has under way: an available-now run (the microbatch DAG's, minutes apart) ends long before
        ``COMPACT_S``, and without this round its job's control tables were never compacted nor pruned."""
        self.halt.set()
        if self.is_alive():
            self.join(timeout=LAST_ROUND_WAIT_S)
        self.compact(again="the job's next run tries again")

    def compact(self, again: str = f"tried again in {COMPACT_S:.0f} s") -> None:
        """Compact the job's control-table files; from this thread, so no batch waits for it."""
        self.compacted = time.monotonic()
        try:
            done = compact_job(self.control.home, self.job)
        except Exception as e:  # a store outage or a race lost: the next round tries again
            reason = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            print(f"[{self.job}] control-table compaction failed, {again}: {reason}", flush=True)
            return
        if any(c.changed for c in done):
            print(f"[{self.job}] compacted control tables: {summary(done)}", flush=True)

    def beat(self) -> None:
        row = {"job": self.job, "model_version": self.version, "batch_id": max(self.batch, -1)}
        with contextlib.suppress(Exception):  # a missed beat must never take the job down
            self.control.metrics.append([{**row, "metric": "heartbeat", "value": time.time()}])
        if self.registration is not None:  # the drivers table: where it runs, for operators (never raises)
            self.registration.beat(self.version, max(self.batch, -1))


def _lifecycle(control: ControlPlane, model: JobModel, event: str) -> float:
    """A query's start, first progress or stop, as a metric row whose value is the wall-clock time.

    Downtime of a model switch is the successor's ``first_progress`` (or
    ``query_started``) minus the predecessor's ``query_stopped``: the same
    measure whether the switch happened inside this application or across a
    restart, and read by ``pipelines.operations.scaling`` from the table. Returns the time it recorded.
    """
    at = time.time()
    with contextlib.suppress(Exception):  # a metric must never take the job down
        control.metrics.append(
            [{"job": model.job_name, "model_version": model.version, "batch_id": -1, "metric": event, "value": at}]
        )
    return at


@dataclass
class _Ahead:
    """The next model's query, started behind a closed gate while the old one finished its last batch."""

    version: int
    query: Any
    gate: Gate
    progress: Callable[[str], None]

    def go(self) -> Any:
        self.gate.open()
        return self.query

    def cancel(self, job: str) -> None:
        """Stop it unused; a stop that fails is said, since its source then fails at the gate (``WAIT_S``)."""
        try:
            self.query.stop()
        except Exception as error:
            self.progress(f"[{job}] v{self.version}'s query started ahead did not stop ({type(error).__name__}: "
                          f"{error}); its source fails at its gate in {WAIT_S:.0f}s at the latest")  # fmt: skip
        self.gate.remove()


def _start_ahead(spark: Any, home: Home, job: str, version: int, progress: Callable[[str], None]) -> list[_Ahead]:
    """Start model ``version``'s query behind a closed gate (``runtime.gate``); none when it cannot be started
    (the switch then starts it after the old query's stop, as it would have, and says why there)."""
    gate = Gate(job, version)
    try:
        model = ControlPlane(home).job_models.get(job, version)
        query = start_query(spark, home, model, available_now=False, gate=str(gate.path))
    except Exception as error:
        gate.remove()
        progress(f"[{job}] v{version} could not start ahead of the switch ({type(error).__name__}): after the stop")
        return []
    # The old query processes meanwhile; one that is not ready in time (or failed: the switch reports it) is let
    # go all the same, and what is left of its start-up shows in the switch's phases.
    with contextlib.suppress(Exception):
        gate.wait_ready(READY_S, lambda: bool(query.isActive))
    return [_Ahead(version, query, gate, progress)]


def _record_switch(control: ControlPlane, model: JobModel, timeline: SwitchTimeline, query: Any) -> None:
    """The switch's phases, once the report of the new query's first batch with data is there (then once)."""
    phases = timeline.phases(query.recentProgress)
    if phases is None:
        return
    timeline.recorded = True
    rows = [
        {"job": model.job_name, "model_version": model.version, "batch_id": -1, "metric": name, "value": value}
        for name, value in phases.items()
    ]
    with contextlib.suppress(Exception):  # a metric must never take the job down
        control.metrics.append(rows)


def _carry_forward_on_start(control: ControlPlane, model: JobModel, progress: Callable[[str], None]) -> None:
    """Start a model that has committed nothing yet exactly where its predecessor's final checkpoints are.

    An in-place switch does this when it stops the old query; a driver started
    after the old one died (or after a rescale whose migration raced the old
    model's last batches) does it here, so the new model never re-reads what
    its predecessor already committed to the sink.
    """
    previous = carry_forward_on_start(control.home, model)
    if previous is not None:
        progress(f"[{model.job_name}] carried v{previous}'s final checkpoints forward to v{model.version}")


def _supervise(
    query: Any,
    control: ControlPlane,
    job: str,
    model: JobModel,
    deadline: float | None,
    progress: Callable[[str], None],
    started: float,
    heartbeat: Heartbeat,
    faults: SparkFaults | None = None,
    timeline: SwitchTimeline | None = None,
    start_ahead: Callable[[int], None] | None = None,
) -> float | None:
    """Watch a query; the time it stopped at, when it stopped because another model version became active
    (None: it ended, or was stopped). ``timeline``: the switch that started it, whose phases it records;
    ``start_ahead(version)``: start the next model's query, gated, before this one stops."""
    last_batch = -1
    durations = BatchDurations(control, model, faults)
    last_model_check = last_stop_check = 0.0
    # On object storage each look is requests (a listing and a read, a HEAD): once a second is enough for an
    # operator's stop and a rescale's activation (a switch starts up to a second later than on local disk).
    stop_every = POLL_S if control.home.is_local else 1.0
    resumed = False
    looks = _Looks(job, progress)
    while True:
        if not query.isActive:
            _lifecycle(control, model, "query_stopped")
            durations.record(query)  # the last batches'
            heartbeat.batch = _report(query, job, last_batch, progress)  # an available-now run's last batch
            exc = query.exception()
            if exc is not None:
                cause = raised_inside(str(exc))
                if cause is not None:  # a task raised one of ours: that, not Spark's trace, is what to say
                    raise type(cause)(f"job {job} v{model.version} failed in a micro-batch: {cause}")
                raise RuntimeError(f"query of job {job} v{model.version} failed: {exc}")
            return None
        if not resumed and (last_batch != -1 or query.status.get("isDataAvailable")):
            at = _lifecycle(control, model, "first_progress")  # the first batch with data is running
            resumed = True
            if timeline is not None:
                timeline.resumed = at
        if timeline is not None and timeline.resumed is not None and not timeline.recorded:
            _record_switch(control, model, timeline, query)
        last_batch = _report(query, job, last_batch, progress)
        heartbeat.batch = last_batch
        heartbeat.progress()
        durations.record(query)
        now = time.monotonic()
        asked = False
        if now - last_stop_check >= stop_every:
            last_stop_check = now
            asked = looks.ask(lambda: requests.stop_asked(control.home, job), otherwise=False)
        if asked or (deadline is not None and now > deadline):
            _stop_at_batch_boundary(query, control.home, job, model.version)
            _lifecycle(control, model, "query_stopped")
            durations.record(query)
            progress(f"[{job}] stopped at a batch boundary after {now - started:.1f}s")
            return None
        if now - last_model_check >= stop_every:  # a Delta read: at most this often, however fast the loop runs
            last_model_check = now
            unchanged: int | None = model.version  # what an unanswered look is taken to say
            active = looks.ask(lambda: control.job_models.active_version(job), otherwise=unchanged)
            if active != model.version:
                meanwhile = None if start_ahead is None or active is None else functools.partial(start_ahead, active)
                _stop_at_batch_boundary(query, control.home, job, model.version, meanwhile=meanwhile)
                stopped = _lifecycle(control, model, "query_stopped")  # run_job carries forward, then starts
                progress(f"[{job}] model v{active} is active: switching")
                return stopped
        _await(query, POLL_S if resumed else POLL_S / 5)  # look closely until processing resumed: it is the downtime


class _Looks:
    """The loop's looks at the home (a stop asked for, the active model) through a store that may not answer.

    The query does not need them to go on: a look the store does not answer
    (``storage.objects.unanswered``) is taken as "nothing new" and asked again
    next time round, and the outage is said once when it starts and once when
    it ends. A stop or a switch asked for during it is seen when it is over.
    """

    def __init__(self, job: str, progress: Callable[[str], None]) -> None:
        self.job, self.progress = job, progress
        self.failing_since: float | None = None

    def ask(self, look: Callable[[], T], *, otherwise: T) -> T:
        from pipelines.storage.objects import unanswered

        try:
            answer = look()
        except Exception as error:
            if not unanswered(error):
                raise
            if self.failing_since is None:
                self.failing_since = time.monotonic()
                self.progress(f"[{self.job}] the home's store did not answer the driver ({error}); the query runs on")
            return otherwise
        if self.failing_since is not None:
            lasted, self.failing_since = time.monotonic() - self.failing_since, None
            self.progress(f"[{self.job}] the home's store answers the driver again after {lasted:.1f}s")
        return answer


def _await(query: Any, seconds: float) -> None:
    """Wait up to ``seconds``, or until the query ends: an available-now run is over when its last batch is.

    A sleep added half a poll on average between a run's last commit and its
    return. A failed query raises here; the loop's next look reports it.
    """
    from pyspark.errors import StreamingQueryException

    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(seconds)


def _stop_at_batch_boundary(
    query: Any, home: Home, job: str, version: int, timeout: float = 60.0, meanwhile: Callable[[], None] | None = None
) -> None:
    """Drain the source, wait for the running micro-batch to finish, then stop; ``meanwhile`` runs first, while
    the query still processes (a switch starts the next query there, behind its gate), so no time passes between
    its last batch and its stop that the switch's downtime would not count.

    A batch still running at ``timeout`` is cut short: it is replayed from the
    committed checkpoints, never lost.
    """
    if meanwhile is not None:
        meanwhile()
    requests.drain(home, job, version)
    try:
        end = time.monotonic() + timeout
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < end:
            time.sleep(0.05)
        query.stop()
    finally:
        requests.undrain(home, job, version)


class BatchDurations:
    """Records each batch's duration as a ``batch_duration_s`` metric row, from Spark's progress reports.

    The duration is Spark's ``durationMs.triggerExecution`` (planning, reading,
    processing and the sink's commit), which only the driver knows: the sink
    commits inside the trigger. Only batches that ran (``addBatch`` among
    their durations) count, each once; idle triggers report no ``addBatch``.
    Not recorded after an in-place switch's stop: that would lengthen the
    switch's downtime, and the batch falls back to the time since the
    previous one in ``pipelines.observe.series``.

    With ``faults``, the newest of these batches also gets the task attempts
    that failed and the executors lost since the previous look
    (``pipelines.core.faults``), each a row only when not 0.
    """

    def __init__(self, control: ControlPlane, model: JobModel, faults: SparkFaults | None = None) -> None:
        self.control = control
        self.model = model
        self.faults = faults
        self.recorded = -1
        self.seen: Any = None

    def record(self, query: Any) -> None:
        latest = query.lastProgress
        stamp = latest.get("timestamp") if latest else None
        if stamp is None or stamp == self.seen:
            return  # no new progress report: nothing to ask Spark for
        self.seen = stamp
        rows = []
        for p in query.recentProgress or []:
            durations = p.get("durationMs") or {}
            batch = int(p.get("batchId", -1))
            if batch > self.recorded and "addBatch" in durations and "triggerExecution" in durations:
                rows.append(
                    {
                        "job": self.model.job_name,
                        "model_version": self.model.version,
                        "batch_id": batch,
                        "metric": DURATION,
                        "value": durations["triggerExecution"] / 1000.0,
                    }
                )
        if not rows:
            return
        newest = max(r["batch_id"] for r in rows)
        seen = self.faults.look() if self.faults is not None else Faults()
        for name, count in ((TASKS_FAILED, seen.tasks_failed), (EXECUTORS_LOST, seen.executors_lost)):
            if count:
                rows.append({**rows[-1], "batch_id": newest, "metric": name, "value": float(count)})
        with contextlib.suppress(Exception):  # a metric must never take the job down
            self.control.metrics.append(rows)
        self.recorded = newest


class SparkFaults:
    """What Spark's status tracker says failed in one query's jobs, and which executors went, since the last look.

    Structured Streaming runs a query's jobs in the job group of its run id,
    so a look asks for that group's jobs not yet charged (a few per batch),
    their stages' failed task counts and the executors now registered; the
    counting is ``pipelines.core.faults.FaultLedger``'s. A look that fails
    answers "nothing seen": a metric must never take the job down.
    """

    def __init__(self, context: Any, group: str) -> None:
        self.tracker, self.group = context.statusTracker(), group
        self.arrays = context._jvm.java.util.Arrays
        self.ledger = FaultLedger(self._executors())

    @classmethod
    def of(cls, spark: Any, query: Any) -> SparkFaults | None:
        """None for a session without a SparkContext (Spark Connect): it has no status tracker."""
        try:
            return cls(spark.sparkContext, str(query.runId))
        except Exception:
            return None

    def _job_ids(self) -> list[int]:
        """The group's job ids in one py4j call: PySpark's ``getJobIdsForGroup`` reads the Java array element by
        element, a call each (79 ms for the 1,000 jobs Spark retains, measured here; this: 6 ms)."""
        text = str(self.arrays.toString(self.tracker._jtracker.getJobIdsForGroup(self.group)))
        return [int(j) for j in text.strip("[]").split(",") if j.strip()]

    def _executors(self) -> frozenset[str]:
        return frozenset(f"{e.host}:{e.port}" for e in self.tracker.getExecutorInfos())

    def look(self) -> Faults:
        try:
            known = self._job_ids()
            jobs = {}
            for job_id in self.ledger.jobs_to_ask(known):
                info = self.tracker.getJobInfo(job_id)
                if info is None:  # no longer retained
                    continue
                stages = {}
                for stage_id in info.stageIds:
                    stage = self.tracker.getStageInfo(stage_id)
                    if stage is not None:
                        stages[int(stage_id)] = int(stage.numFailedTasks)
                jobs[job_id] = JobSeen(ended=info.status in ("SUCCEEDED", "FAILED"), failed_per_stage=stages)
            return self.ledger.settle(jobs, self._executors(), known)
        except Exception:
            return Faults()


def _report(query: Any, job: str, last_batch: int, progress: Callable[[str], None]) -> int:
    p = query.lastProgress
    if not p or p.get("batchId", -1) == last_batch:
        return last_batch
    took = (p.get("durationMs") or {}).get("triggerExecution", 0) / 1000.0
    # Spark's numInputRows counts the source's rows, one per virtual task: records are in the metrics table.
    progress(f"[{job}] batch {p['batchId']}: {p.get('numInputRows', 0)} virtual tasks read, {took:.2f}s")
    return int(p["batchId"])


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__)
    parser.add_argument("--home")
    parser.add_argument("--job", required=True)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--max-seconds", type=float)
    args = parser.parse_args(argv)
    die_with_parent()  # the JVM that started this driver: a killed spark-submit takes its driver along
    from pipelines.runtime.session import build_session

    home = resolve_home(args.home)
    spark = build_session(args.master, app_name=f"pipelines-{args.job}")
    try:
        run_job(
            spark,
            home,
            args.job,
            available_now=args.available_now,
            max_seconds=args.max_seconds,
            progress=lambda m: print(m, file=sys.stderr, flush=True),
        )
    except PipelinesError as e:  # one line for the user; Spark's log above holds the whole trace
        requests.note_failure(home, args.job, type(e).__name__, str(e))
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
