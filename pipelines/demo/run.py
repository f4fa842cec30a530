"""The end-to-end demo on the embedded default: a live stateful job through scale-up, expansion and scale-down.

A producer appends keyed events continuously (faster than factor 1 can keep
up with, at 2 ms per record); the demo's job (``include/jobs/customer-totals.yaml``:
per customer, its events, their amounts' sum and its last seq, kept as keyed
state, and its current name from an adjunct store fed by a change stream)
runs as a continuous driver in this process's Spark application. Each step
changes the running job with the operations the Airflow DAGs run, in this process:

* scale up to 4 and down to 3 (not a divisor of 4): ``pipelines.operations.scaling.run_all``, the
  steps of ``elastic_rescale``;
* expand the input 2 -> 4: ``pipelines.operations.repartition.detect`` and
  the same steps with GroupByPartitionFixedTaskNum, as ``repartition_watch``.

Every switch happens in place (the driver stops its query at a batch
boundary and starts the new model's query in the same Spark application), is
verified with the Great Expectations suites over its scaling window, and is
recorded with its downtime; the checks include the state check (every
customer's row counts its events in the input). At the end the producer
stops, the job drains its backlog, the whole run is verified, and three
customers' state rows are read with Spark SQL beside their counts in the input.

``--input kafka`` runs the same story on a real Apache Kafka broker (one
KRaft node on 127.0.0.1, ``testbed.servers.kafka_broker``) that the demo
starts and stops. Its expansion step adds partitions to the live topic with
``CreatePartitions``; the producer refreshes its metadata every second and the
job holds the new partitions back for ``KAFKA_GRACE_MS`` (``expansion_grace_ms``),
so every key stays in order across the expansion.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipelines.adjunct.inspect import verify_store
from pipelines.control import ControlPlane
from pipelines.control.scaling_events import ScalingEvent
from pipelines.core.metric_names import DURATION, LAG
from pipelines.core.model import JobModel
from pipelines.demo.enrich import CUSTOMERS
from pipelines.demo.producer import KeyedEvents, produce
from pipelines.errors import ConfigError, PipelinesError, StreamError
from pipelines.jobs.config import JobConfig
from pipelines.operations import repartition, scaling
from pipelines.operations.jobs import create_job
from pipelines.quality.report import QualityReport, run_quality
from pipelines.runtime import requests
from pipelines.runtime.driver import run_job
from pipelines.storage.home import Home
from pipelines.systems.base import InputSystem
from pipelines.systems.deltalog import DeltaLog
from pipelines.texttable import table

JOB_CONFIG = str(Path(__file__).resolve().parents[2] / "include" / "jobs" / "customer-totals.yaml")  # any cwd
STREAM = "events"
STEPS: list[tuple[str, int | None, int | None]] = [  # (step, factor, expand the input to this many partitions)
    ("start at factor 1", 1, None),
    ("scale up to 4", 4, None),
    ("expand input 2 -> 4", None, 4),
    ("scale down to 3", 3, None),
]
KAFKA_METADATA_REFRESH_MS = 1000  # how soon the demo's producer sees new partitions ...
KAFKA_GRACE_MS = 3000  # ... well inside the job's hold-back window after it notices them
HEADERS = [
    "step",
    "factor",
    "partitions",
    "virtual tasks",
    "records",
    "records/s",
    "lag after",
    "downtime",
    "replayed",
    "no loss",
    "no dup",
    "order",
    "routing",
    "state",
    "state keys",
    "state MB",
]


@dataclass
class StepResult:
    step: str
    factor: int
    partitions: int
    tasks: int
    version: int = 0
    records: int = 0
    rate: float = 0.0
    lag_after: int | None = None  # records behind the input when this model handed over (or stopped)
    downtime_s: float | None = None
    replayed: int | None = None
    counts: dict[str, int] | None = None  # the step's DQ counts (lost, duplicates, out_of_order, misrouted)
    state_keys: int | None = None  # the state's rows in the home after the step, and their bytes
    state_bytes: int | None = None
    passed: bool = True
    notes: list[str] = field(default_factory=list)

    def row(self) -> list[str]:
        def verdict(key: str) -> str:
            if self.counts is None:
                return "-"
            n = self.counts.get(key, 0)
            return "ok" if n == 0 else f"BAD {n}"

        return [
            self.step,
            str(self.factor),
            str(self.partitions),
            str(self.tasks),
            f"{self.records:,}",
            f"{self.rate:,.0f}" if self.rate else "-",
            "-" if self.lag_after is None else f"{self.lag_after:,}",
            f"{self.downtime_s:.2f}s" if self.downtime_s is not None else "-",
            "-" if self.replayed is None else str(self.replayed),
            verdict("lost"),
            verdict("duplicates"),
            verdict("out_of_order"),
            verdict("misrouted"),
            self._state(),
            "-" if self.state_keys is None else f"{self.state_keys:,}",
            "-" if self.state_bytes is None else f"{self.state_bytes / 1e6:.2f}",
        ]

    def _state(self) -> str:
        """The state check of the step's window: ok, or how many keys' rows disagree with the input."""
        if self.counts is None:
            return "-"
        wrong = sum(v for k, v in self.counts.items() if k.startswith("state:") and not k.endswith(":keys"))
        judged = [k for k in self.counts if k.startswith("state:") and not k.endswith(":keys")]
        if not judged:
            return "-"
        return "ok" if wrong == 0 else f"BAD {wrong} keys"


class Producer(threading.Thread):
    """Appends ``rate`` keyed records per second (in 2 commits a second) until stopped."""

    def __init__(self, home: Home, rate: int, keys: int, system: InputSystem) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self.home, self.rate, self.keys = home, rate, keys
        self.log = system
        self.halt = threading.Event()
        self.produced = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        tick = 0.5  # each append is a commit of the log and a file per partition: fewer, larger ones read faster
        per_tick = max(1, int(self.rate * tick))
        events: KeyedEvents | None = None
        try:
            while not self.halt.is_set():
                started = time.monotonic()
                try:
                    if events is None:
                        events = KeyedEvents.open(self.log, self.home, STREAM, self.keys, seed=None)
                    events.append(per_tick)
                except StreamError:  # the input does not answer: wait, as producers do
                    events = None  # an append may have landed unanswered: learn every key's seq from the stream again
                    self.halt.wait(0.5)
                    continue
                self.produced += per_tick
                self.halt.wait(max(0.0, tick - (time.monotonic() - started)))
        except BaseException as e:  # reported by the demo, which then stops
            self.error = e


class CustomerChanges(threading.Thread):
    """The customer table as a change stream: a name per key first, then renames and deletions while the job runs.

    The job looks every event's key up in the ``customers`` adjunct store fed
    by this stream; an empty value deletes the customer (the event then gets
    no name), a later value brings it back.
    """

    def __init__(self, home: Home, keys: int, per_second: int = 20) -> None:
        super().__init__(name="demo-customers", daemon=True)
        self.log, self.keys, self.per_second = DeltaLog(home.streams), keys, per_second
        self.halt = threading.Event()
        self.changes = 0
        self.deletes = 0
        self.error: BaseException | None = None

    def first_names(self) -> None:
        self.log.create(CUSTOMERS, 1)
        self.log.produce(CUSTOMERS, [(f"key-{k}".encode(), f"customer {k}".encode(), None) for k in range(self.keys)])

    def run(self) -> None:
        import random

        rng = random.Random(1)
        try:
            while not self.halt.wait(1.0):
                batch = []
                for _ in range(self.per_second):
                    k = rng.randrange(self.keys)
                    deleted = rng.random() < 0.2
                    name = b"" if deleted else f"customer {k} v{self.changes}".encode()
                    batch.append((f"key-{k}".encode(), name, None))
                    self.changes += 1
                    self.deletes += deleted
                self.log.produce(CUSTOMERS, batch)
        except BaseException as e:  # reported by the demo, which then stops
            self.error = e


class Driver(threading.Thread):
    """The job's continuous driver, in this process: switches models in place when they are activated."""

    def __init__(self, spark: Any, home: Home, job: str, say: Any) -> None:
        super().__init__(name="demo-driver", daemon=True)
        self.spark, self.home, self.job, self.say = spark, home, job, say
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            run_job(self.spark, self.home, self.job, available_now=False, progress=lambda m: self.say("  " + m))
        except BaseException as e:
            self.error = e

    def stop(self, timeout: float = 120.0) -> None:
        requests.ask_stop(self.home, self.job)
        self.join(timeout)


@contextlib.contextmanager
def from_testbed(demo: str) -> Iterator[None]:
    """Import a local server from the repository's ``testbed/``, which the installed package leaves out.

    The embedded demo needs no server; the Kafka and Kinesis demos start one, as the tests do, and a deployment
    (docs/layout.md) runs its own: without a checkout beside it the demo says so instead of a traceback.
    """
    try:
        yield
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("testbed"):
            raise
        raise ConfigError(
            f"the {demo} demo starts its own server from the repository's testbed/, which an installed package "
            f"does not hold: run it from a checkout (scripts/demo.sh --input {demo})"
        ) from None


def _refuse_a_home_of_others(home: Home, demo_job: str) -> None:
    """The demo starts from an empty home; it wipes only a home that holds nothing but an earlier demo."""
    others = sorted(set(ControlPlane(home).job_models.jobs()) - {demo_job})
    streams = DeltaLog(home.streams).list_streams()
    foreign = [f"job {j}" for j in others] + [f"stream {s}" for s in streams if s not in (STREAM, CUSTOMERS)]
    if foreign:
        raise ConfigError(
            f"the demo wipes its home, and {home.root} holds {', '.join(foreign)}; give the demo an empty "
            "--home (or leave --home out: it then uses <home>/demo)"
        )


@dataclass(frozen=True)
class DemoPace:
    """How a demo drives its job: the input's rate and keys, each step's run, the per-record latency of its
    process function, Spark's master, and how long a rescale may take to catch up."""

    rate: int = 900
    step_seconds: float = 10.0
    keys: int = 200
    latency_ms: float = 2.0
    master: str = "local[8]"
    catch_up_s: float = 300.0


def run_demo(
    home: Home,
    pace: DemoPace = DemoPace(),
    *,
    say: Any = print,
    input: str = "deltalog",
    steps: list[tuple[str, int | None, int | None]] | None = None,
    on_step: Any = None,
) -> tuple[list[StepResult], Any]:
    """The demo's story (``steps``: the default STEPS) on a live job; ``on_step(result)`` after each step."""
    from pipelines.runtime.session import build_session

    rate, keys, master = pace.rate, pace.keys, pace.master

    raw = JobConfig.load(JOB_CONFIG).to_dict()
    if home.store.list(home.root):
        _refuse_a_home_of_others(home, raw["name"])
        home.store.delete_tree(home.root)
    raw["process_options"] = {"latency_ms": pace.latency_ms}
    raw["process"] = "pipelines.demo.totals:totals_with_names"
    raw["stores"] = {CUSTOMERS: {"input": CUSTOMERS, "partitioning": "broadcast", "bootstrap": True}}
    raw["output_schema"] += ", name STRING"
    broker = None
    steps = steps or STEPS
    system: InputSystem
    if input == "kafka":
        from pipelines.systems.kafka import KafkaSystem

        with from_testbed("kafka"):
            from testbed.servers.kafka_broker import KafkaBroker
        broker = KafkaBroker()
        try:
            broker.start()
        except BaseException:
            broker.close()
            raise
        say(f"Apache Kafka broker (one KRaft node) on {broker.bootstrap}, started in {broker.started_in_s:.1f}s")
        settings = {
            "bootstrap_servers": broker.bootstrap,
            "timeout_ms": 5000,
            "expansion_grace_ms": KAFKA_GRACE_MS,
            "properties": {"topic.metadata.refresh.interval.ms": KAFKA_METADATA_REFRESH_MS},
        }
        raw["inputs"] = [{"system": "kafka", "stream": STREAM}]
        raw["systems"] = {"kafka": settings}
        system = KafkaSystem(settings)
    else:
        system = DeltaLog(home.streams)
    system.create(STREAM, 2)
    config = JobConfig.from_dict(raw, origin=JOB_CONFIG)
    customers = CustomerChanges(home, keys)
    customers.first_names()
    say(f"home: {home.root}\nstarting Spark ({master}) ...")
    # Great Expectations takes about 6 s to import: while the JVM starts, not at the first step's verification
    threading.Thread(target=importlib.import_module, args=("great_expectations",), daemon=True).start()
    spark = build_session(master, app_name="pipelines-demo")
    results: list[StepResult] = []
    producer = Producer(home, rate, keys, system)
    driver: Driver | None = None
    try:
        produce(system, home, STREAM, rate, keys, seed=0)  # a first second of input
        create_job(home, config)
        producer.start()
        customers.start()
        driver = Driver(spark, home, config.name, say)
        driver.start()
        for step, factor, expand_to in steps:
            say(f"\n== {step}")
            _check(producer, driver, customers)
            if expand_to is not None:
                system.expand(STREAM, expand_to)
                how = " (CreatePartitions on the live Kafka topic)" if broker is not None else ""
                say(f"  input {STREAM} expanded to {expand_to} partitions{how}")
                changes = repartition.detect(home, [config.name])
                request = changes[0].request()  # what repartition_watch would absorb
            elif factor is not None and results:  # the first step starts the job
                request = scaling.ScalingRequest(config.name, factor, step)
            else:
                request = None
            model, event = take_step(home, config.name, step, request, pace, say)
            step_started = time.time()
            time.sleep(pace.step_seconds)  # the job runs on the new model while records keep arriving
            behind = falling_behind(home, config.name, model.version, step_started, config.trigger_interval)
            if behind:
                say("  " + behind)
            result = step_result(step, model, event)
            result.state_keys, result.state_bytes = _state_size(home, config)
            results.append(result)
            if on_step is not None:
                on_step(result)
        final = drain_and_verify(home, config.name, results, say, driver, producer, customers)
        state_sample = _state_beside_input(spark, home, config, system)
        store = verify_store(home, config.name, CUSTOMERS)
        say(
            f"  store {CUSTOMERS}: {customers.changes:,} changes ({customers.deletes:,} deletes) while the job ran; "
            f"{store.checked:,} sampled lookups vs the change stream: {store.mismatches} mismatches"
            + "".join(f"\n    {e}" for e in store.examples)
        )
        if not store.success:
            raise PipelinesError(f"store {CUSTOMERS} serves values its change stream does not hold")
    finally:
        customers.halt.set()
        producer.halt.set()
        if driver is not None and driver.is_alive():
            driver.stop()
        spark.stop()
        system.close()
        if broker is not None:
            broker.close()
    total = whole_run(results, final)
    total.state_keys, total.state_bytes = _state_size(home, config)
    say("\n" + table(HEADERS, [r.row() for r in [*results, total]]))
    for note in total.notes:
        say(f"FAILED: {note}")
    say(
        f"\n(input arrives at {rate:,} records/s. records/s: the model's processing rate over its batches; "
        "lag after: records behind the input when it handed over;\n downtime: the old query's stop at a batch "
        "boundary to the new query's first batch, inside one Spark application)"
    )
    say(f"\nsink: {home.sinks / config.sink_table}\ndead letters: {home.sinks / config.dead_letter_table}")
    say(state_sample)
    say(f"data docs: {final.docs_index}")
    return [*results, total], final


def _state_size(home: Home, config: JobConfig) -> tuple[int | None, int | None]:
    """The job's state in the home now: its keys (one row each as of the last commit) and the bytes of its tables
    (``current`` plus the changes not folded in yet)."""
    if not config.state:
        return None, None
    from pipelines.state.durable import StateTables
    from pipelines.state.inspect import StateMovedOn, state_at

    _, size = StateTables(home, config.name, config.state[0]).size()
    for _ in range(3):  # the running driver's compactor may retire the changes it reads: read again
        try:
            return state_at(home, config.name, config.state[0], None).num_rows, size
        except StateMovedOn:
            continue
    return None, size


def _state_beside_input(spark: Any, home: Home, config: JobConfig, system: InputSystem, customers: int = 3) -> str:
    """Three customers' state rows read with Spark SQL (``pipelines sql``'s views), beside their events counted
    in the input itself: what a user would look at to trust the state."""
    import json

    from pipelines.observe.sql import register, run_query

    if not config.state:
        return ""
    register(spark, home)
    view = "state_" + "".join(c if c.isalnum() or c == "_" else "_" for c in f"{config.name}_{config.state[0].name}")
    query = (
        f"SELECT CAST(key AS STRING) AS customer, events, amount, last_seq, _records FROM {view} "
        f"ORDER BY events DESC, customer LIMIT {customers}"
    )
    columns, rows = run_query(spark, query)
    wanted = {str(r[0]).encode(): [0, 0, -1] for r in rows}
    for p, part in system.describe(STREAM).partitions.items():
        read = system.read(STREAM, p, part.earliest, part.end, columns=["key", "value"]).records
        for key, value in zip(read.column("key").to_pylist(), read.column("value").to_pylist(), strict=True):
            if key in wanted:
                event = json.loads(value)
                wanted[key][0] += 1
                wanted[key][1] += int(event["amount"])
                wanted[key][2] = max(wanted[key][2], int(event["seq"]))
    cells = [[*map(str, r), *map(str, wanted[str(r[0]).encode()])] for r in rows]
    head = [*columns, "input events", "input amount", "input last seq"]
    return f"\nthe state, read with Spark SQL ({query.split(' FROM ')[0]} FROM {view} ...):\n{table(head, cells)}"


def falling_behind(home: Home, job: str, version: int, since: float, trigger_interval: str) -> str | None:
    """One line, in the demo's words, for the batches of a step that took longer than the trigger interval.

    Spark warns once per such trigger ("Current batch is falling behind"), into the log file; a step
    is summed up here once: how many batches fell behind, the longest, and the lag at the step's end.
    """
    from datetime import UTC, datetime

    from pipelines.core.durations import parse_duration

    interval = parse_duration(trigger_interval, "trigger_interval", zero=True).total_seconds()
    metrics = [DURATION, LAG]
    start = datetime.fromtimestamp(since, UTC)
    frame = ControlPlane(home).metrics.read(job, model_version=version, metrics=metrics, since=start)
    if not len(frame) or interval <= 0:
        return None
    durations = frame[frame["metric"] == DURATION]["value"]
    late = durations[durations > interval]
    if not len(late):
        return None
    lag = frame[frame["metric"] == LAG]
    behind = int(lag[lag["batch_id"] == lag["batch_id"].max()]["value"].sum()) if len(lag) else None
    lag_text = f"; {behind:,} records behind the input at its last batch" if behind is not None else ""
    return (
        f"falling behind: {len(late)} of {len(durations)} batches took longer than the {trigger_interval} trigger "
        f"(the longest {late.max():.1f} s){lag_text}"
    )


class _Part(Protocol):
    """A thread of the demo (a producer, a driver): its name, and the error that ended it, if one did."""

    @property
    def name(self) -> str: ...

    @property
    def error(self) -> BaseException | None: ...


def take_step(
    home: Home, job: str, step: str, request: scaling.ScalingRequest | None, pace: DemoPace, say: Any
) -> tuple[JobModel, ScalingEvent | None]:
    """Run a step's scaling request to its verified end (None: only let the job process); the model it left
    running, and the step's scaling event."""
    event = None
    if request is not None:
        outcome = scaling.run_all(home, request, catch_up_timeout_s=pace.catch_up_s, say=lambda m: say("  " + m))
        event = ControlPlane(home).events.history(job)[-1]
        if outcome["status"] != "verified":
            raise PipelinesError(f"{step}: the scaling step ended {outcome['status']}")
    else:
        _wait_processing(home, job)
    return ControlPlane(home).job_models.active(job), event


def step_result(step: str, model: JobModel, event: ScalingEvent | None) -> StepResult:
    """A step's row, from the model it left running and its scaling event (None: the start, which has none)."""
    result = StepResult(step, model.elasticity_factor, sum(model.partitions().values()), model.task_count)
    result.version = model.version
    if event is not None:
        result.downtime_s = event.details.get("downtime_s")
        result.replayed = event.details.get("records_replayed")
        result.counts = event.details.get("dq_counts")
        result.passed = event.details.get("dq") == "pass"
    return result


def drain_and_verify(
    home: Home, job: str, results: list[StepResult], say: Any, driver: Driver, *producers: _Producing
) -> QualityReport:
    """Stop producing, let the job catch up, stop it at a batch boundary; each model's figures; the run's checks."""
    say("\n== drain: stop producing, let the job catch up, stop it at a batch boundary")
    for producer in producers:
        producer.halt.set()
        producer.join(30)
    target = scaling.end_positions(home, job)
    version = ControlPlane(home).job_models.active_version(job)
    assert version is not None
    deadline = time.monotonic() + 300
    while not scaling.lag_behind(home, job, version, target)[0] and time.monotonic() < deadline:
        _check(driver, *producers)
        time.sleep(1)
    driver.stop()
    for result in results:  # each model's figures over its whole life, now that it has ended
        result.records, result.rate, result.lag_after = _throughput(home, job, result.version)
    final = run_quality(home, job, sequence="seq")
    say("  " + final.summary().replace("\n", "\n  "))
    return final


def whole_run(results: list[StepResult], final: QualityReport) -> StepResult:
    """The table's last row: the last model's shape, and the whole run's verdict."""
    total = StepResult("whole run", results[-1].factor, results[-1].partitions, results[-1].tasks)
    v = final.verdict
    total.records = v.rows + v.dead_letters
    total.counts = {"lost": v.lost, "duplicates": v.duplicates, "out_of_order": v.order_violations}
    total.counts["misrouted"] = v.misrouted
    total.counts.update({f"state:{s.state}": s.wrong for s in v.states})
    # The demo's job fails no record: a dead letter there is a bug of the demo (its producer and its function
    # disagree on the records), which the checks alone would count as delivered.
    total.passed = final.success and v.dead_letters == 0
    if v.dead_letters:
        total.notes.append(f"{v.dead_letters:,} records went to the dead-letter table: the demo's job failed them")
    return total


class _Producing(_Part, Protocol):
    """A thread of the demo that produces until halted."""

    halt: threading.Event

    def join(self, timeout: float | None = None) -> None: ...


def _check(*parts: _Part | None) -> None:
    for part in parts:
        if part is not None and part.error is not None:
            raise PipelinesError(f"the demo's {part.name} failed: {part.error}") from part.error


def _wait_processing(home: Home, job: str, batches: int = 2, timeout: float = 180.0) -> None:
    """Until the job's driver is live and has committed ``batches`` batches (Spark's first batch is slow)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        control = ControlPlane(home)
        beat = scaling.last_heartbeat(control, job)
        version = control.job_models.active_version(job)
        if (
            beat is not None
            and beat["live"]
            and version is not None  # a live driver runs an active version
            and _at_least(control.checkpoints.latest_batch(job, version), batches - 1)
        ):
            return
        time.sleep(0.5)
    raise PipelinesError(f"the driver of {job} did not start processing within {timeout:.0f}s")


def _at_least(batch: int | None, wanted: int) -> bool:
    """Batch 0 is a batch: ``latest_batch`` is None before any checkpoint and -1 for start checkpoints only."""
    return batch is not None and batch >= wanted


def _throughput(home: Home, job: str, version: int) -> tuple[int, float, int | None]:
    """A model version's records, its rate from its first to its last batch commit, and its last batch's lag."""
    frame = ControlPlane(home).metrics.read(job, model_version=version, metrics=["records_in", LAG])
    records_in = frame[frame["metric"] == "records_in"] if len(frame) else frame
    if not len(records_in):
        return 0, 0.0, None
    records = int(records_in["value"].sum())
    lag = frame[frame["metric"] == LAG]
    lag_after = int(lag[lag["batch_id"] == lag["batch_id"].max()]["value"].sum()) if len(lag) else None
    per_batch = records_in.groupby("batch_id")["at"].min().sort_index()
    if len(per_batch) < 2:
        return records, 0.0, lag_after
    span = (per_batch.iloc[-1] - per_batch.iloc[0]).total_seconds()
    first = int(records_in[records_in["batch_id"] == per_batch.index[0]]["value"].sum())
    return records, (records - first) / span if span > 0 else 0.0, lag_after


def main(home: Home, pace: DemoPace, input: str = "deltalog") -> int:
    results, _ = run_demo(home, pace, input=input)
    ok = all(r.passed for r in results)
    print("\ndemo " + ("passed: every step verified" if ok else "FAILED verification"), file=sys.stderr)
    return 0 if ok else 1
