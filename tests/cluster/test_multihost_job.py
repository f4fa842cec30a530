"""A job across hosts on an object-store home, operated with the CLI from hosts of its own.

The home is ``s3://<bucket>/home`` on the S3 server of host ``store``; the
Spark master runs on ``master``, a worker on ``worker1`` and ``worker2``, the
driver (``pipelines run``, a Spark application of the cluster) on ``driver1``,
and every operation (produce, rescale, expand, stop, verify) is a CLI call on
``driver2``, standing in for an Airflow worker. The hosts share nothing but the
store and the network: each has its own ``/tmp``, pids and host-local state,
and every process gets the store's AWS variables in its environment.

In one run: a 2-partition stream read at factor 4 by tasks on both worker
hosts, each record enriched through a broadcast adjunct store that every
executor host fills from the home (one record it cannot parse goes to the dead
letters) and counted in keyed state per key; the store's input updated, then a live
rescale to 8 issued from another host, after which the new value is served;
the stream expanded to 4 partitions and absorbed live; worker1 killed whole
while one of its tasks runs (Spark retries the task on worker2, the job goes
on); the driver stopped from another host and started again on ``driver2``.
The whole run must then verify with nothing lost, duplicated, out of order or
misrouted, every key's state counting its records once, and the drivers table shows the driver's move.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from testbed.hosts import HOST_TMP, Cluster, Host, HostProcess
from testbed.spark import SparkCluster, driver_confs
from testbed.store import StoreHost

pytestmark = pytest.mark.slow

JOB = "multihost"
KEYS = 40
STEP = 800  # records produced per step
SINK = f"{JOB}_out"
JOB_YAML = f"""
name: {JOB}
inputs:
  - system: deltalog
    stream: events
grouper: GroupByPartition
elasticity_factor: 4
containers: 1
process: tests.cluster.enrich:process
output_schema: "event_key STRING, seq BIGINT, payload STRING, enriched STRING, events BIGINT"
process_options:
  latency_ms: 2
state:
  name: seen
  value_schema: "events BIGINT, last_seq BIGINT"
stores:
  customers:
    input: customers
    partitioning: broadcast
    bootstrap: true
sink:
  table: {SINK}
dead_letter:
  table: {JOB}_dead
batch:
  max_records: 100
  trigger_interval: "0 seconds"
trigger: continuous
"""
SPARK_CONF_DIR = str(HOST_TMP / "spark-conf")  # in each driver host's own /tmp: its spark-defaults.conf
LOG4J2 = """
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = info
"""
"""The driver's log: Spark's warnings, and each task's start, end and loss with its host (``setLogLevel`` moves
the root logger only), which is how the test sees tasks lost with a killed worker host retried on the other."""

SINK_PROBE = """
import json, sys
from pipelines.storage.home import Home
from pipelines.deltaio import is_table, read_delta
table = Home(sys.argv[1]).sinks / sys.argv[2]

def summary():
    rows = read_delta(table).to_pandas() if is_table(table) else None
    versions = {} if rows is None else {int(v): int(n) for v, n in rows["model_version"].value_counts().items()}
    seen = {} if rows is None else {
        int(v): sorted(set(g["enriched"].fillna("-")))
        for v, g in rows[rows["event_key"] == "key-3"].groupby("model_version")
    }
    wrong = 0 if rows is None else int(((rows["enriched"] != rows["event_key"].str.replace("key-", "name-"))
                                        & (rows["event_key"] != "key-3")).sum())
    return {"rows": 0 if rows is None else len(rows), "versions": versions, "key-3": seen, "wrong": wrong}

for request in sys.stdin:
    print(json.dumps({"answer": int(request), **summary()}), flush=True)
"""
"""A warm reader of the sink, run once on a host: each line it is sent is answered with one JSON line in its log.
Polling through it costs a Delta read, not a Python start and its imports (seconds of CPU on this machine, a
core's worth at two polls a second, taken from the Spark tasks the test waits for)."""
DRIVERS = """
import json, sys
from pipelines.control import ControlPlane
from pipelines.storage.home import Home
drivers = ControlPlane(Home(sys.argv[1])).drivers.latest(sys.argv[2], recent_s=3600)
print(json.dumps([[d.host, d.state] for d in drivers]))
"""
CUSTOMERS = """
import sys
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
log = DeltaLog(Home(sys.argv[1]).streams)
if sys.argv[2] == "create":
    log.create("customers", 2)
    log.produce("customers", [(f"key-{i}".encode(), f"name-{i}".encode(), None) for i in range(int(sys.argv[3]))])
else:
    log.produce("customers", [(b"key-3", b"renamed-3", None)])
print("{}")
"""
BAD_RECORD = """
import sys
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
DeltaLog(Home(sys.argv[1]).streams).produce("events", [(b"key-1", b"{not json", None)])
print("{}")
"""
"""A record the process function cannot parse: an executor on a worker host writes it to the dead letters."""
FAULTS = """
import json, sys
from pipelines.control import ControlPlane
from pipelines.storage.home import Home
rows = ControlPlane(Home(sys.argv[1])).metrics.read(sys.argv[2], metrics=["tasks_failed", "executors_lost"])
print(json.dumps([[int(r.model_version), int(r.batch_id), r.metric, r.value] for r in rows.itertuples()]))
"""
"""The driver's rows of what Spark lost, per batch: ``[version, batch, metric, value]``."""
VERIFY = """
import json, sys
from pipelines.storage.home import Home
from pipelines.quality.verify import verify_job
v = verify_job(Home(sys.argv[1]), sys.argv[2], sequence="seq")
figures = {k: getattr(v, k) for k in (
    "records_expected", "rows", "dead_letters", "lost", "duplicates", "order_violations", "misrouted", "unread")}
figures["states"] = {s.state: {"keys": s.keys, "wrong": s.wrong, "examples": s.examples} for s in v.states}
print(json.dumps(figures))
"""


class Deployment:
    """The job's home and the hosts' environments: what a real deployment configures on every host."""

    def __init__(self, cluster: Cluster, store: StoreHost, spark: SparkCluster, home: str) -> None:
        self.cluster, self.store, self.spark, self.home = cluster, store, spark, home
        self.probe: HostProcess | None = None
        self.asked = 0

    def env(self) -> dict[str, str]:
        # Host-local state (pid files, logs) and HOME in the host's own /tmp: nothing shared through the disk.
        return {
            **self.store.env,
            "PIPELINES_LOCAL_DIR": str(HOST_TMP / "pipelines-local"),
            "HOME": str(HOST_TMP / "home"),
            "SPARK_CONF_DIR": SPARK_CONF_DIR,
            "PYTHONUNBUFFERED": "1",
        }

    def configure_driver_host(self, host: Host) -> None:
        """Small JVMs, and no batch before both workers' executors registered (``spark-defaults.conf``)."""
        conf = "".join(f"{k} {v}\n" for k, v in driver_confs(cores=2).items())
        script = f"mkdir -p {SPARK_CONF_DIR} && cat > {SPARK_CONF_DIR}/spark-defaults.conf"
        host.exec(["sh", "-c", script], input=conf, check=True)
        host.exec(["sh", "-c", f"cat > {SPARK_CONF_DIR}/log4j2.properties"], input=LOG4J2, check=True)

    def cli(self, host: Host, *args: str, timeout: float = 240.0) -> str:
        argv = [sys.executable, "-m", "pipelines", "--home", self.home, *args]
        try:
            done = host.exec(argv, self.env(), timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"`pipelines {' '.join(args)}` on {host.name}: no end in {timeout:.0f} s") from e
        assert done.returncode == 0, (
            f"`pipelines {' '.join(args)}` on {host.name} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
        return done.stdout

    def cli_started(self, host: Host, *args: str) -> HostProcess:
        """A CLI call started and not waited for (``cli_done``): it overlaps a step that waits on something else."""
        argv = [sys.executable, "-m", "pipelines", "--home", self.home, *args]
        return host.run(argv, self.env(), log_name=f"cli-{args[0]}")

    def cli_done(self, proc: HostProcess, timeout: float = 240.0) -> None:
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{proc.log_path.name}: no end in {timeout:.0f} s\n{_tail(proc)}") from e
        assert code == 0, f"{proc.log_path.name} exited {code}:\n{_tail(proc)}"

    def start_driver(self, host: Host) -> HostProcess:
        argv = [sys.executable, "-m", "pipelines", "--home", self.home, "--verbose", "run", JOB]
        argv += ["--master", self.spark.url, "--continuous"]
        return host.run(argv, self.env(), log_name="driver")

    def python(self, host: Host, code: str, *args: str) -> Any:
        done = host.python(code, *args, env=self.env(), timeout=120)
        assert done.returncode == 0, f"on {host.name}:\n{done.stderr[-3000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    def start_probe(self, host: Host) -> None:
        argv = [sys.executable, "-c", SINK_PROBE, self.home, SINK]
        self.probe = host.run(argv, self.env(), log_name="sink-probe", with_stdin=True)

    def sink(self, timeout: float = 60.0) -> dict[str, Any]:
        """The sink's rows now, as the probe (``start_probe``) reads them."""
        self.asked += 1
        assert self.probe is not None and self.probe.stdin is not None, "start_probe first"
        self.probe.stdin.write(f"{self.asked}\n")
        self.probe.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in reversed(self.probe.log_path.read_text(errors="replace").splitlines()):
                if line.startswith('{"answer": '):
                    answer = json.loads(line)
                    if answer.pop("answer") == self.asked:
                        return answer
                    break
            if self.probe.poll() is not None:
                raise AssertionError(f"the sink probe exited with {self.probe.returncode}:\n{_tail(self.probe)}")
            time.sleep(0.05)
        raise AssertionError(f"the sink probe did not answer in {timeout:.0f} s:\n{_tail(self.probe)}")

    def wait_rows(
        self, driver: HostProcess, total: int, timeout: float, until: Callable[[int], bool] | None = None
    ) -> dict[str, Any]:
        """Poll the sink until it holds ``total`` rows (or ``until(rows)``); fail if the driver ends first."""
        done = until or (lambda rows: rows >= total)
        deadline = time.monotonic() + timeout
        while True:
            seen = self.sink()
            if done(seen["rows"]):
                return seen
            if driver.poll() is not None:
                raise AssertionError(f"the driver exited with {driver.returncode}:\n{_tail(driver)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"sink at {seen} after {timeout:.0f} s, {total} due\n{_tail(driver)}")
            time.sleep(0.5)


def _tail(proc: HostProcess, chars: int = 6000) -> str:
    return proc.log_path.read_text(errors="replace")[-chars:]


STARTED = re.compile(r"^(\S+) .*Starting task (\d+)\.(\d+) in stage (\S+) \(TID (\d+)\) \(([\d.]+),", re.M)
FINISHED = re.compile(r"^(\S+) .*Finished task (\d+)\.(\d+) in stage (\S+) \(TID (\d+)\) .* on ([\d.]+) ", re.M)
LOST = re.compile(
    r"task (\d+)\.(\d+) in stage (\S+) \(TID (\d+)\) failed because while it was being computed, its exec"
)


JUST_STARTED_S = 0.05


def _finished_per_host(log: str) -> Counter[str]:
    """Tasks the driver saw finish, per executor host address."""
    return Counter(m[6] for m in FINISHED.finditer(log))


def _wait_for_a_running_task(ip: str, driver: HostProcess, timeout: float) -> None:
    """Return as soon as the driver's log shows a task on ``ip`` started less than ``JUST_STARTED_S`` ago and not
    finished: so it is still running when the caller acts (none of the job's tasks takes under 0.1 s). The log is
    read on from where the last look ended (whole lines), not again from its start every 20 ms."""
    deadline = time.monotonic() + timeout
    started: dict[str, float] = {}
    finished: set[str] = set()
    with driver.log_path.open("rb") as log:
        log.seek(0, 2)  # only tasks from now on
        pending = b""
        while time.monotonic() < deadline:
            pending += log.read()
            complete, _, pending = pending.rpartition(b"\n")
            text = complete.decode(errors="replace")
            started.update((m[5], _seconds(m[1])) for m in STARTED.finditer(text) if m[6] == ip)
            finished.update(m[5] for m in FINISHED.finditer(text))
            now = _seconds(datetime.now().strftime("%H:%M:%S.%f"))
            if any((now - at) % 86400 < JUST_STARTED_S for tid, at in started.items() if tid not in finished):
                return
            if driver.poll() is not None:
                raise AssertionError(f"the driver exited with {driver.returncode}:\n{_tail(driver)}")
            time.sleep(0.02)
    raise AssertionError(f"no task ran on {ip} for {timeout:.0f} s")


def _wait_for_retries(
    ip: str, driver: HostProcess, timeout: float
) -> tuple[re.Match[str], list[tuple[str, str]], dict[tuple[str, str], str]]:
    """Once Spark saw the executor on ``ip`` go and every task lost with it finished again on another host: the
    loss's log line, the lost (task, stage) pairs and when each retry finished."""
    deadline = time.monotonic() + timeout
    while True:
        log = _tail(driver, 10**8)
        gone = re.search(rf"^(\S+) ERROR .*Lost executor \d+ on {re.escape(ip)}", log, re.M)
        lost = [(m[1], m[3]) for m in LOST.finditer(log)]
        retried = {(m[2], m[4]): m[1] for m in FINISHED.finditer(log) if m[3] != "0" and m[6] != ip}
        if gone and lost and set(lost) <= set(retried):
            return gone, lost, retried
        if driver.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"within {timeout:.0f} s, Spark should see the executor on {ip} go ({bool(gone)}), a task lost with"
                f" it ({lost}) and each retried on another host ({retried}):\n{log[-4000:]}"
            )
        time.sleep(0.2)


def _seconds(stamp: str) -> float:
    hours, minutes, seconds = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def test_a_job_rescales_expands_survives_a_dead_worker_host_and_moves_its_driver_across_hosts(
    cluster: Cluster, store: StoreHost, spark_cluster: SparkCluster
) -> None:
    timings: dict[str, Any] = {}
    began = time.monotonic()
    ops_host, first_driver_host, worker1 = cluster["driver2"], cluster["driver1"], cluster["worker1"]
    deployment = Deployment(cluster, store, spark_cluster, f"s3://{store.create_bucket()}/home")
    for host in (cluster["driver1"], cluster["driver2"]):
        deployment.configure_driver_host(host)
    deployment.start_probe(cluster["store"])  # a host no test step kills
    cli = deployment.cli
    try:
        # (a) a 2-partition stream, a factor-4 job on driver1, tasks on both worker hosts
        # (steps that wait on nothing of each other overlap: the driver's start-up with the records' production)
        events = deployment.cli_started(ops_host, "stream", "create", "events", "--partitions", "2")
        deployment.python(ops_host, CUSTOMERS, deployment.home, "create", str(KEYS))
        deployment.cli_done(events)
        job_yaml = str(HOST_TMP / "job.yaml")  # in the ops host's own /tmp
        ops_host.exec(["sh", "-c", f"cat > {job_yaml}"], input=JOB_YAML, check=True)
        cli(ops_host, "job", "create", JOB, "--config", job_yaml)
        driver = deployment.start_driver(first_driver_host)
        cli(ops_host, "stream", "produce", "events", "--records", str(STEP), "--keys", str(KEYS))
        deployment.python(ops_host, BAD_RECORD, deployment.home)
        deployment.wait_rows(driver, STEP, timeout=240)
        timings["first rows"] = time.monotonic() - began
        per_host = _finished_per_host(_tail(driver, 10**8))
        assert sorted(per_host) == sorted(h.ip for h in spark_cluster.workers), f"tasks on both workers: {per_host}"

        # (b) an adjunct store's input updated, then a live rescale to 8 from another host; records before and after
        deployment.python(ops_host, CUSTOMERS, deployment.home, "update")
        mark = time.monotonic()
        cli(ops_host, "rescale", JOB, "--factor", "8", "--master", spark_cluster.url, timeout=300)
        timings["rescale"] = time.monotonic() - mark
        cli(ops_host, "stream", "produce", "events", "--records", str(STEP), "--keys", str(KEYS))
        seen = deployment.wait_rows(driver, 2 * STEP, timeout=120)
        assert driver.poll() is None, "the driver switched in place"
        assert set(seen["versions"]) == {"1", "2"}, seen
        assert seen["key-3"] == {"1": ["name-3"], "2": ["renamed-3"]}, (
            f"the store's new version after the switch: {seen}"
        )
        assert seen["wrong"] == 0, seen

        # (c) the stream expanded to 4 partitions while the job runs; absorbed live (SEP-5)
        mark = time.monotonic()
        cli(ops_host, "stream", "expand", "events", "--partitions", "4")
        cli(ops_host, "watch", "--apply", "--master", spark_cluster.url, timeout=300)
        timings["expansion"] = time.monotonic() - mark
        cli(ops_host, "stream", "produce", "events", "--records", str(STEP), "--keys", str(KEYS))
        seen = deployment.wait_rows(driver, 3 * STEP, timeout=120)
        assert set(seen["versions"]) == {"1", "2", "3"}, seen

        # (d) worker1 killed whole (every process of the host) while a batch is in flight; the job goes on
        before = 3 * STEP
        backlog = 2 * STEP  # one batch: 32 tasks (4 partitions x factor 8) of 50 records, >= 0.1 s each
        cli(ops_host, "stream", "produce", "events", "--records", str(backlog), "--keys", str(KEYS))
        _wait_for_a_running_task(worker1.ip, driver, timeout=120)  # a task of the batch is running on worker1
        killed_at = time.monotonic()
        worker1.kill_all()
        gone, lost, retried = _wait_for_retries(worker1.ip, driver, timeout=120)
        timings["tasks lost with worker1"] = len(lost)
        timings["kill to last retry finished (s)"] = max(_seconds(retried[t]) for t in lost) - _seconds(gone[1])
        # the host comes back (as after a reboot: empty /tmp) and its worker rejoins while the batch finishes
        worker1.boot()
        spark_cluster.start_worker(worker1)
        deployment.wait_rows(driver, before + backlog, timeout=180)
        timings["backlog done after the kill"] = time.monotonic() - killed_at
        assert driver.poll() is None, "the driver went on with worker2"
        after_kill = _tail(driver, 10**8)[gone.start() :]
        timings["batches after the kill (s)"] = [float(t) for t in re.findall(r"tasks read, ([\d.]+)s", after_kill)]
        in_flight = int(re.findall(r"\] batch (\d+): \d+ virtual tasks read", after_kill)[0])  # the first to end
        spark_cluster.wait_for_workers()

        # (e) the driver stopped from another host, started again on driver2
        mark = time.monotonic()
        cli(ops_host, "stop", JOB, timeout=180)
        assert driver.wait(timeout=60) == 0, _tail(driver)
        driver = deployment.start_driver(ops_host)
        cli(first_driver_host, "stream", "produce", "events", "--records", str(STEP), "--keys", str(KEYS))
        total = before + backlog + STEP
        deployment.wait_rows(driver, total, timeout=240)
        timings["driver moved"] = time.monotonic() - mark
        cli(first_driver_host, "stop", JOB, timeout=180)
        assert driver.wait(timeout=60) == 0, _tail(driver)

        drivers = deployment.python(first_driver_host, DRIVERS, deployment.home, JOB)
        assert drivers == [["driver2", "stopped"], ["driver1", "stopped"]], (
            f"the move is in the drivers table: {drivers}"
        )
        # the kill in the metrics (the batch in flight: v3 after the expansion) and both on the page's data
        faults = deployment.python(first_driver_host, FAULTS, deployment.home, JOB)
        charged = {(m, v) for version, batch, m, v in faults if (version, batch) == (3, in_flight)}
        timings["faults rows"] = faults
        assert {m for m, _ in charged} == {"tasks_failed", "executors_lost"}, f"batch {in_flight}: {faults}"
        assert dict(charged)["tasks_failed"] >= len(lost) and dict(charged)["executors_lost"] == 1, faults
        page = json.loads(cli(ops_host, "status", JOB, "--json"))
        assert any(f.startswith(f"v3 batch {in_flight}: ") and "1 executor lost" in f for f in page["faults"]), page
        assert "faults" in {c["key"] for c in page["charts"]}, page["charts"]
        assert [d["host"] for d in page["driver"]["drivers"]][:2] == ["driver2", "driver1"], page["driver"]
        verdict = deployment.python(first_driver_host, VERIFY, deployment.home, JOB)
        assert verdict["records_expected"] == total + 1 and verdict["rows"] == total, verdict
        assert verdict["dead_letters"] == 1, f"the unparsable record in the dead letters: {verdict}"
        assert verdict["lost"] == verdict["duplicates"] == verdict["order_violations"] == 0, verdict
        assert verdict["misrouted"] == verdict["unread"] == 0, verdict
        # every key's state counts its records exactly once, through the rescale, the expansion, the dead worker
        # host (its tasks' state changes retried on the other) and the driver's move to another host
        assert verdict["states"]["seen"] == {"keys": KEYS, "wrong": 0, "examples": []}, verdict["states"]
        timings["total"] = time.monotonic() - began
    finally:
        print(f"timings (s from the test's start or per step): {json.dumps(timings)}")
        if deployment.probe is not None:
            deployment.probe.kill()
            deployment.probe.wait(timeout=30)
        for host in (cluster["driver1"], cluster["driver2"]):  # no driver outlives the test, whatever failed
            host.kill_all()
            host.boot()
        if not worker1.alive:  # the session's Spark cluster gets both workers back for the tests after this one
            worker1.kill_all()
            worker1.boot()
            spark_cluster.start_worker(worker1)
            spark_cluster.wait_for_workers()
