"""The demo on Kinesis (``scripts/demo.sh --input kinesis``): a live job through rescales, a split and a merge.

It starts kinesis-mock on the loopback interface (``testbed.servers.kinesis_emulator``),
creates a 2-shard stream, produces keyed events continuously, and runs the
enrichment job on it as a live driver, through the steps the issue asks for:
start at factor 1, scale up to 2, split a shard, merge two shards, scale down
to 1. A reshard is absorbed the way ``repartition_watch`` absorbs it
(``repartition.detect`` then the scaling steps): the running job switches in
place to one slot per open shard, the shards' checkpoints laid out on the new
slots. Every step is verified over its scaling window and the whole run at
the end; the table is the default demo's.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from pipelines.control import ControlPlane
from pipelines.errors import PipelinesError
from pipelines.jobs.config import JobConfig
from pipelines.operations import repartition, scaling
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home
from pipelines.systems.kinesis import KinesisSystem
from pipelines.systems.kinesis.positions import decode_slot
from pipelines.texttable import table

from .run import (
    HEADERS,
    JOB_CONFIG,
    DemoPace,
    Driver,
    StepResult,
    _check,
    _refuse_a_home_of_others,
    drain_and_verify,
    from_testbed,
    step_result,
    take_step,
    whole_run,
)

STREAM = "events"
KINESIS_PACE = DemoPace(rate=1000, step_seconds=12.0)
"""Kinesis's own pace: a step runs longer, so a split's children take over their parents' keys within it."""
Step = tuple[str, int | None, str | None]  # (step, factor to scale to, "split" or "merge" a shard)
STEPS: list[Step] = [
    ("start on 2 shards at factor 1", 1, None),
    ("scale up to 2", 2, None),
    ("split shard 0 (3 shards)", None, "split"),
    ("merge 2 shards (2 shards)", None, "merge"),
    ("scale down to 1", 1, None),
]


class KinesisProducer(threading.Thread):
    """Appends ``rate`` keyed records per second (4 PutRecords rounds a second), per-key ``seq`` in memory."""

    def __init__(self, system: KinesisSystem, rate: int, keys: int) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self.system, self.rate, self.keys = system, rate, keys
        self.seq: dict[str, int] = {}
        self.halt = threading.Event()
        self.produced = 0
        self.error: BaseException | None = None

    def batch(self, n: int) -> list[tuple[bytes, bytes, None]]:
        records = []
        for i in range(n):
            key = f"key-{(self.produced + i) % self.keys}"
            seq = self.seq.get(key, 0)
            self.seq[key] = seq + 1
            n = self.produced + i
            value = {"key": key, "seq": seq, "amount": 1 + n * 7919 % 999, "payload": f"{n:08x}"}
            records.append((key.encode(), json.dumps(value, separators=(",", ":")).encode(), None))
        return records

    def run(self) -> None:
        tick = 0.25
        per_tick = max(1, int(self.rate * tick))
        try:
            while not self.halt.is_set():
                started = time.monotonic()
                self.system.produce(STREAM, self.batch(per_tick))
                self.produced += per_tick
                self.halt.wait(max(0.0, tick - (time.monotonic() - started)))
        except BaseException as e:  # reported by the demo, which then stops
            self.error = e


def run_kinesis_demo(
    home: Home,
    pace: DemoPace = KINESIS_PACE,
    *,
    say: Any = print,
    steps: list[Step] | None = None,
    on_step: Any = None,
) -> tuple[list[StepResult], Any]:
    """The Kinesis demo's story (``steps``: the default STEPS) on a live job; ``on_step(result)`` after each step.

    A split takes the lowest open shard of the stream, a merge its two highest
    neighbours (adjacent hash key ranges, as Kinesis requires).
    """
    from pipelines.runtime.session import build_session

    rate, keys, master, step_seconds = pace.rate, pace.keys, pace.master, pace.step_seconds
    if home.store.list(home.root):
        _refuse_a_home_of_others(home, JobConfig.load(JOB_CONFIG).name)
        home.store.delete_tree(home.root)
    with from_testbed("kinesis"):
        from testbed.servers.kinesis_emulator import KinesisEmulator
    emulator = KinesisEmulator()
    endpoint = emulator.start()
    say(f"home: {home.root}\nkinesis-mock on {endpoint}")
    settings = {"endpoint_url": endpoint, "region": "us-east-1"}
    system = KinesisSystem(settings)
    system.create(STREAM, 2)
    raw = JobConfig.load(JOB_CONFIG).to_dict()
    raw.update(
        inputs=[{"system": "kinesis", "stream": STREAM}],
        systems={"kinesis": settings},
        process_options={"latency_ms": pace.latency_ms},
    )
    config = JobConfig.from_dict(raw, origin=JOB_CONFIG)
    say(f"starting Spark ({master}) ...")
    spark = build_session(master, app_name="pipelines-demo-kinesis")
    producer = KinesisProducer(system, rate, keys)
    driver: Driver | None = None
    results: list[StepResult] = []
    try:
        system.produce(STREAM, producer.batch(rate))  # a first second of input
        producer.produced += rate
        create_job(home, config)
        producer.start()
        driver = Driver(spark, home, config.name, say)
        driver.start()
        for step, factor, reshard in steps or STEPS:
            say(f"\n== {step}")
            _check(producer, driver)
            request = None
            if factor is not None and results:  # the first step starts the job
                request = scaling.ScalingRequest(config.name, factor, step)
            elif reshard is not None:
                _reshard(system, reshard, say)
                if reshard == "split":
                    # Before the watch switches: the model's 2 slots read 3 shards, one slot holds two (1:n).
                    time.sleep(step_seconds)
                    before = ControlPlane(home).job_models.active(config.name).version
                    say("  before the switch (the 1:n composite positions):")
                    _show_slots(home, config.name, before, say)
                changes = repartition.detect(home, [config.name])
                if not changes or changes[0].error:
                    raise PipelinesError(f"{step}: the repartition watch would not absorb it: {changes}")
                request = changes[0].request()
            model, event = take_step(home, config.name, step, request, pace, say)
            time.sleep(step_seconds)  # the job runs on the new model while records keep arriving
            _show_slots(home, config.name, model.version, say)
            result = step_result(step, model, event)
            results.append(result)
            if on_step is not None:
                on_step(result)
        final = drain_and_verify(home, config.name, results, say, driver, producer)
    finally:
        producer.halt.set()
        if driver is not None and driver.is_alive():
            driver.stop()
        spark.stop()
        emulator.stop()
    total = whole_run(results, final)
    say("\n" + table(HEADERS, [r.row() for r in [*results, total]]))
    for note in total.notes:
        say(f"FAILED: {note}")
    say(
        f"\n(input: {rate:,} records/s into Kinesis (kinesis-mock). partitions: the model's slots; lag after: "
        "Kinesis lag is time, not a record count, so it shows '-';\n downtime: the old query's stop at a batch "
        "boundary to the new query's first batch, inside one Spark application)"
    )
    return [*results, total], final


def _reshard(system: KinesisSystem, action: str, say: Any) -> None:
    shards = system.open_shards(STREAM)  # ordered by hash key range: neighbours are adjacent
    if action == "split":
        children = system.split_shard(STREAM, shards[0])
        say(f"  split {shards[0]} into {', '.join(children)}")
        return
    low, high = shards[-2], shards[-1]
    child = system.merge_shards(STREAM, low, high)
    say(f"  merged {low} and {high} into {child}")


def _show_slots(home: Home, job: str, version: int, say: Any) -> None:
    """Each slot's shards as its last checkpoint has them: the 1:n composite shows here."""
    latest = ControlPlane(home).checkpoints.latest(job, version)
    seen: dict[int, str] = {}
    for ssp, position in sorted(latest.offsets.items(), key=lambda item: item[0].partition):
        if ssp.partition in seen:
            continue
        slot = decode_slot(position)
        shards = sorted(slot.shards.items())
        seen[ssp.partition] = ", ".join(f"{s} {'@..' + v[-6:] if v.isdigit() else v}" for s, v in shards)
    for p, text in sorted(seen.items()):
        say(f"  v{version} slot {p}: {text or '(free)'}")


def main(home: Home, pace: DemoPace) -> int:
    results, _ = run_kinesis_demo(home, pace)
    ok = all(r.passed for r in results)
    print("\ndemo " + ("passed: every step verified" if ok else "FAILED verification"), file=sys.stderr)
    return 0 if ok else 1
