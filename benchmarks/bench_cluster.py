"""Benchmark of a job across hosts: scale-out over worker hosts, and a live rescale's downtime on a cluster.

The hosts are Linux namespaces on this machine (``testbed``): an S3 server on ``store`` holding the home,
a standalone Spark master on ``master``, a worker (1 core, as ``testbed.spark`` starts them) on ``worker1``
and ``worker2``, and the drivers and every CLI call on ``driver``. The hosts share nothing but the store and
the network, as in ``tests/cluster``.

* **scale-out**: the 2 ms/record job (``pipelines.demo.enrich``) at factor 8 over a 2-partition stream, run
  available-now by a driver on ``driver``, first with one worker host, then with two (the second worker joins
  between the runs). Records/s are the records over the sum of the job's micro-batch durations (Spark's
  ``triggerExecution``, the driver's ``batch_duration_s`` rows): an application's start and its executors'
  registration are not in them. The figure is two workers' records/s over one's (2.0 would be linear; the
  machine's 2 cores are all the hosts have, shared with their JVMs and the store).
* **rescale downtime**: a continuous job (factor 4, 2 ms/record) whose driver runs on ``driver`` is rescaled
  live ``--steps`` times (4 -> 8 -> 4 ...) with ``pipelines rescale``, each after 2,000 records (2-5 batches)
  were appended, so records wait on both sides of the switch; the
  downtime is the rescale's own figure (old query stopped -> new query's first batch with data, both stamped
  by the driver). Baseline: the same steps with the driver on the same host in ``local[2]``, same home. The
  figure is the cluster's median downtime over local's.

Every run is verified afterwards (nothing lost, duplicated or out of order; exit 1 otherwise).

    python -m benchmarks.bench_cluster [--records 16000] [--steps 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipelines.usage import Parser
from testbed.hosts import HOST_TMP, Cluster, HostProcess
from testbed.spark import SparkCluster, driver_confs, start_spark_cluster
from testbed.store import start_store

HOSTS = ("store", "master", "worker1", "worker2", "driver")
KEYS = 200
SPARK_CONF_DIR = str(HOST_TMP / "spark-conf")
JOB_YAML = """
name: {name}
inputs:
  - system: deltalog
    stream: {stream}
grouper: GroupByPartition
elasticity_factor: {factor}
containers: 1
process: pipelines.demo.enrich:process
output_schema: "event_key STRING, seq BIGINT, payload STRING, enriched STRING"
process_options:
  latency_ms: 2
sink:
  table: {name}_out
dead_letter:
  table: {name}_dead
batch:
  max_records: {max_records}
  trigger_interval: "0 seconds"
trigger: continuous
"""
RATE = """
import json, sys
from pipelines.control import ControlPlane
from pipelines.storage.home import Home
rows = ControlPlane(Home(sys.argv[1])).metrics.read(sys.argv[2], metrics=["records_in", "batch_duration_s"])
records = rows[rows["metric"] == "records_in"]["value"].sum()
durations = rows[rows["metric"] == "batch_duration_s"]
print(json.dumps({"records": int(records), "seconds": float(durations["value"].sum()), "batches": len(durations)}))
"""
VERIFY = """
import json, sys
from pipelines.storage.home import Home
from pipelines.quality.verify import verify_job
v = verify_job(Home(sys.argv[1]), sys.argv[2], sequence="seq")
print(json.dumps({k: getattr(v, k) for k in ("records_expected", "rows", "lost", "duplicates", "order_violations")}))
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Bench:
    """The deployment: the home on the store, every call a CLI (or Python) process on the driver host."""

    def __init__(self, cluster: Cluster, spark: SparkCluster, store_env: dict[str, str], home: str) -> None:
        self.cluster, self.spark, self.home = cluster, spark, home
        self.host = cluster["driver"]
        self.env = {
            **store_env,
            "PIPELINES_LOCAL_DIR": str(HOST_TMP / "pipelines-local"),
            "HOME": str(HOST_TMP / "home"),
            "SPARK_CONF_DIR": SPARK_CONF_DIR,
            "PYTHONUNBUFFERED": "1",
        }
        self.failures: list[str] = []

    def spark_defaults(self, cores: int) -> None:
        """Small JVMs, and no batch before ``cores`` executor cores registered (``spark-defaults.conf``)."""
        conf = "".join(f"{k} {v}\n" for k, v in driver_confs(cores=cores).items())
        self.host.exec(["sh", "-c", f"mkdir -p {SPARK_CONF_DIR} && cat > {SPARK_CONF_DIR}/spark-defaults.conf"],
                       input=conf, check=True)  # fmt: skip

    def cli(self, *args: str, timeout: float = 600.0) -> str:
        argv = [sys.executable, "-m", "pipelines", "--home", self.home, *args]
        done = self.host.exec(argv, self.env, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"`pipelines {' '.join(args)}` exited {done.returncode}:\n{done.stderr[-4000:]}")
        return done.stdout

    def python(self, code: str, *args: str) -> Any:
        done = self.host.python(code, self.home, *args, env=self.env, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])

    def create_job(self, name: str, stream: str, factor: int, max_records: int) -> None:
        path = str(HOST_TMP / f"{name}.yaml")
        text = JOB_YAML.format(name=name, stream=stream, factor=factor, max_records=max_records)
        self.host.exec(["sh", "-c", f"cat > {path}"], input=text, check=True)
        self.cli("job", "create", name, "--config", path)

    def verify(self, job: str) -> dict[str, Any]:
        verdict: dict[str, Any] = self.python(VERIFY, job)
        bad = verdict["lost"] or verdict["duplicates"] or verdict["order_violations"]
        if bad or verdict["rows"] != verdict["records_expected"]:
            self.failures.append(f"{job}: {verdict}")
            log(f"  DATA-QUALITY FAILURE {job}: {verdict}")
        return verdict


def scale_out(bench: Bench, records: int, workers: int) -> dict[str, float]:
    """The factor-8 job available-now with ``workers`` worker hosts: records/s over its batches' durations."""
    job = f"wide{workers}"
    bench.spark_defaults(cores=workers)
    bench.create_job(job, "events", 8, max_records=records // 16)  # 2 batches at factor 8: 16 tasks each
    t = time.monotonic()
    bench.cli("run", job, "--master", bench.spark.url, "--available-now")
    wall = time.monotonic() - t
    rate = bench.python(RATE, job)
    bench.verify(job)
    result = {"records_per_s": rate["records"] / rate["seconds"], "wall_s": wall, **rate}
    per_s = result["records_per_s"]
    log(f"  {workers} worker host(s): {rate['records']} records in {rate['batches']} batches, "
        f"{rate['seconds']:.1f} s of batches ({per_s:,.0f} records/s), {wall:.1f} s wall")  # fmt: skip
    return result


def wait_for_batch(driver: HostProcess, timeout: float = 300.0) -> None:
    """Until the driver's log shows a micro-batch (its query runs and read records)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(r"\] batch \d+: [1-9]", driver.log_path.read_text(errors="replace")):
            return
        if driver.poll() is not None:
            raise RuntimeError(f"the driver exited {driver.returncode}:\n{driver.log_path.read_text()[-4000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"no batch in {timeout:.0f} s:\n{driver.log_path.read_text()[-4000:]}")


def rescales(bench: Bench, mode: str, master: str, steps: int, backlog: int = 2000) -> list[float]:
    """Live rescales 4 -> 8 -> 4 ... of a continuous job whose driver runs on the driver host with ``master``."""
    job = f"live_{mode}"
    bench.create_job(job, "live", 4, max_records=100)
    argv = [sys.executable, "-m", "pipelines", "--home", bench.home, "run", job, "--master", master, "--continuous"]
    driver = bench.host.run(argv, bench.env, log_name=f"driver-{mode}")
    downtimes = []
    try:
        bench.cli("stream", "produce", "live", "--records", "400", "--keys", str(KEYS))
        wait_for_batch(driver)
        factor = 4
        for _ in range(steps):
            factor = 8 if factor == 4 else 4
            # a backlog of several batches, so records are waiting when the old query stops and the new one starts
            bench.cli("stream", "produce", "live", "--records", str(backlog), "--keys", str(KEYS))
            result = json.loads(bench.cli("--json", "rescale", job, "--factor", str(factor), "--master", master))
            downtimes.append(float(result["downtime_s"]))
            log(f"  {mode}: -> factor {factor}: downtime {downtimes[-1]:.2f} s ({result['status']})")
        bench.cli("stop", job)
        driver.wait(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    bench.verify(job)
    return downtimes


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=16000, help="records of the scale-out runs")
    parser.add_argument("--steps", type=int, default=2, help="live rescales per mode")
    parser.add_argument("--quick", action="store_true", help="a smoke size: 1,600 records, one rescale per mode")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.steps = 1600, 1
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    cluster = Cluster(HOSTS, work)
    log(f"building {len(HOSTS)} hosts (logs in {work})")
    with cluster:
        workers = [cluster["worker1"], cluster["worker2"]]
        with (
            start_store(cluster["store"]) as store,
            start_spark_cluster(cluster["master"], workers[:1], env=store.env) as spark,
        ):
            bucket = store.create_bucket()
            bench = Bench(cluster, spark, store.env, f"s3://{bucket}/home")
            log(f"cluster up in {time.monotonic() - began:.0f} s; producing {args.records:,} records")
            bench.cli("stream", "create", "events", "--partitions", "2")
            bench.cli("stream", "produce", "events", "--records", str(args.records), "--keys", str(KEYS))
            bench.cli("stream", "create", "live", "--partitions", "2")
            log("scale-out: the 2 ms/record job at factor 8")
            one = scale_out(bench, args.records, 1)
            spark.start_worker(workers[1])
            spark.wait_for_workers()
            two = scale_out(bench, args.records, 2)
            log(f"live rescales ({args.steps} per mode)")
            bench.spark_defaults(cores=2)
            cluster_downtimes = rescales(bench, "cluster", spark.url, args.steps)
            local_downtimes = rescales(bench, "local", "local[2]", args.steps)
    cluster_s, local_s = statistics.median(cluster_downtimes), statistics.median(local_downtimes)
    figures = {
        "records": args.records,
        "records_per_s_one_worker": round(one["records_per_s"], 1),
        "records_per_s_two_workers": round(two["records_per_s"], 1),
        "two_over_one_workers": round(two["records_per_s"] / one["records_per_s"], 3),
        "rescale_downtime_cluster_s": round(cluster_s, 3),
        "rescale_downtime_local_s": round(local_s, 3),
        "rescale_downtimes_cluster_s": [round(d, 3) for d in cluster_downtimes],
        "rescale_downtimes_local_s": [round(d, 3) for d in local_downtimes],
        "cluster_over_local_downtime": round(cluster_s / local_s, 3) if local_s else None,
        "total_s": round(time.monotonic() - began, 1),
    }
    print(f"\n{'2 ms/record job, factor 8':<34} {'records/s':>10} {'batches s':>10} {'wall s':>8}")
    for label, run in (("one worker host (1 core)", one), ("two worker hosts (1 core each)", two)):
        print(f"{label:<34} {run['records_per_s']:>10,.0f} {run['seconds']:>10.1f} {run['wall_s']:>8.1f}")
    print(f"two / one: {figures['two_over_one_workers']:.2f}x")
    print(f"\n{'live rescale downtime':<34} {'median s':>10} {'each s':>20}")
    modes = (("cluster (driver on its host)", cluster_downtimes), ("local[2] on the same host", local_downtimes))
    for label, runs in modes:
        print(f"{label:<34} {statistics.median(runs):>10.2f} {' '.join(f'{d:.2f}' for d in runs):>20}")
    print(f"cluster / local: {figures['cluster_over_local_downtime']}x")
    print(json.dumps({"bench": "cluster", "figures": figures}))
    if bench.failures:
        log("DATA-QUALITY FAILURE: " + "; ".join(bench.failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
