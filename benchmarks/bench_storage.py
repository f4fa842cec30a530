"""Benchmark of the home's storage: the same job with the home on local disk and on an S3 store, in one run.

    python -m benchmarks.bench_storage [--records 32000] [--keys 2000] [--latency-ms 2] [--factors 1,8]
                                       [--fixed-batches 24] [--max-records 4000]

What runs, in ONE SparkSession (``local[16]``; session start excluded), against two homes made the same way:
a local folder, and ``s3://<bucket>/bench`` on SeaweedFS (``weed mini`` on loopback, the test suite's store).
Requests are counted afterwards, in a second process whose every client (boto3, pyarrow, delta-rs in its
Python workers, hadoop-aws in its JVM for Spark's checkpoint) reaches the store through a counting proxy
(``testbed.servers.s3_proxy``), running the same fixed-cost batches and the top factor's job on a fresh
S3 home: by kind, PUT, GET, LIST, HEAD, DELETE, POST. The timed runs do not go through the proxy, whose own
latency would be the store's.

* **fixed cost per micro-batch**: ``--fixed-batches`` micro-batches of 100 records at factor 1 and no time
  per record, so a batch's time is its fixed cost (``bench_runtime``'s measure): the median per home, and
  the object-store requests each batch made, by kind. Requests are also split between the first and the
  last third of the batches: a count that grows with the batches already committed (a log replayed from
  its start, a listing that grows) shows as a ratio above 1.
* **the job at factors 1 and 8**: ``--records`` keyed events, the 2 ms/record enrichment, per home: wall
  time, records/s, and factor 8's speed-up over factor 1 on each home; requests per micro-batch at factor 8.
  Every run is checked for lost, duplicated and reordered records; a failure exits non-zero.

Figures (the last line, JSON): ``s3_vs_local_batch_overhead`` (S3's fixed cost over local's; goal <= 2.0),
``s3_vs_local_speedup_f8`` (S3's factor-8 speed-up over local's; goal >= 0.9), ``s3_requests_per_batch_f8``
and its parts by kind, ``s3_requests_growth`` (last third over first third of the fixed-cost batches).
The driver's home watch (one HEAD a second, ``runtime.driver.HomeWatch``) is among the requests counted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_runtime import FIXED_BATCH_RECORDS, ProgressListener, log, produce, run_elastic, table
from pipelines.usage import Parser

KINDS = ("PUT", "GET", "LIST", "HEAD", "DELETE", "POST")


class BatchRequests:
    """Snapshots of the proxy's counts at every micro-batch's progress event, per query name."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self.snapshots: dict[str, list[dict[str, int]]] = {}
        self.lock = threading.Lock()

    def make(self) -> Any:
        from pyspark.sql.streaming import StreamingQueryListener

        outer = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                with outer.lock:
                    outer.snapshots.setdefault(event.name, []).append(outer.proxy.counts())

            def onQueryProgress(self, event: Any) -> None:
                if event.progress.numInputRows:
                    with outer.lock:
                        outer.snapshots.setdefault(event.progress.name, []).append(outer.proxy.counts())

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        return _Listener()

    def per_batch(self, name: str) -> list[dict[str, int]]:
        """Requests made between consecutive snapshots: one dict per micro-batch with data."""
        shots = self.snapshots.get(name, [])
        return [{k: b.get(k, 0) - a.get(k, 0) for k in KINDS} for a, b in itertools.pairwise(shots)]


def _median(batches: list[dict[str, int]], kind: str | None = None) -> float:
    values = [sum(b.values()) if kind is None else b.get(kind, 0) for b in batches]
    return float(statistics.median(values)) if values else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=32_000)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--factors", default="1,8")
    parser.add_argument("--fixed-batches", type=int, default=24)
    parser.add_argument("--max-records", type=int, default=4000, help="batch.max_records at factor 1")
    parser.add_argument("--count-only", action="store_true", help=argparse.SUPPRESS)  # the counting child
    args = parser.parse_args(argv)
    if args.count_only:
        return count_requests(args)
    factors = sorted({1, *(int(f) for f in args.factors.split(","))})
    top = max(factors)

    from pipelines.runtime.session import build_session
    from pipelines.storage.home import Home
    from testbed.servers.s3 import running_s3
    from testbed.servers.s3_proxy import proxied

    scratch = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    with running_s3(scratch / "s3") as server:
        os.environ.update(server.env())
        bucket = server.create_bucket("bench-storage")
        homes = {"local": Home(scratch / "home"), "s3": Home(f"s3://{bucket}/bench")}
        for where, home in homes.items():
            log(f"{where}: producing {args.records:,} records over {args.keys} keys, and the fixed-cost stream")
            produce(home, "events", args.records, args.keys)
            produce(home, "tiny", args.fixed_batches * FIXED_BATCH_RECORDS, 20, seed=5)
            produce(home, "warmup", 2000, 20, seed=1)
        t = time.perf_counter()
        spark = build_session(f"local[{2 * top}]", app_name="bench-storage")
        log(f"session started in {time.perf_counter() - t:.1f}s (excluded)")
        listener = ProgressListener()
        spark.streams.addListener(listener.make())
        for where, home in homes.items():  # untimed: Python workers started, s3a and the store's clients warm
            log(f"{where}: warm-up at factor {top}")
            _run(spark, home, None, "warm", "warmup", top, 0, 400, 2000)

        fixed: dict[str, float] = {}
        for where, home in homes.items():
            log(f"{where}: {args.fixed_batches} micro-batches of {FIXED_BATCH_RECORDS} records ...")
            _run(spark, home, listener, "fixed", "tiny", 1, 0, FIXED_BATCH_RECORDS,
                 args.fixed_batches * FIXED_BATCH_RECORDS)  # fmt: skip
            progress = [b for b in listener.batches.pop("fixed-v1", []) if b.get("rows")]
            fixed[where] = statistics.median(b["triggerExecution"] for b in progress) / 1000.0
            log(f"  median {fixed[where]:.3f}s a batch over {len(progress)} batches")

        runs: dict[tuple[str, int], Any] = {}
        for factor in factors:
            for where, home in homes.items():  # interleaved, so both homes see the same machine
                log(f"{where}: factor {factor}, {args.latency_ms} ms/record ...")
                run = _run(spark, home, listener, f"job_f{factor}", "events", factor, args.latency_ms,
                           args.max_records, args.records)  # fmt: skip
                runs[(where, factor)] = run
                log(f"  {run.seconds:.1f}s, {run.rate:,.0f} records/s, {run.batches} batches")
        spark.stop()

        # Requests are counted by a proxy in the path, which adds its own latency: so in a second process, whose
        # JVM and Python workers all talk to the store through it, running the same fixed-cost batches and job.
        log("counting requests: the same batches and job again, through a counting proxy, in a process of its own")
        with proxied(server.endpoint) as proxy:
            child = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_storage", "--count-only", *(argv or sys.argv[1:])],
                env={**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint, "BENCH_STORAGE_BUCKET": bucket},
                stdout=subprocess.PIPE,
                text=True,
                check=True,
            )
        counted = json.loads(child.stdout.strip().splitlines()[-1])

    def speedup(where: str) -> float:
        return float(runs[(where, top)].rate / runs[(where, 1)].rate)

    rows = [
        [f"fixed cost per micro-batch ({FIXED_BATCH_RECORDS} records)"]
        + [f"{fixed[w]:.3f} s" for w in homes]
        + [f"{fixed['s3'] / fixed['local']:.2f}x"]
    ]
    for factor in factors:
        local, s3 = runs[("local", factor)].rate, runs[("s3", factor)].rate
        rows.append([f"factor {factor}: records/s", f"{local:,.0f}", f"{s3:,.0f}", f"{s3 / local:.2f}x"])
    rows.append([f"factor {top} over factor 1", f"{speedup('local'):.2f}x", f"{speedup('s3'):.2f}x",
                 f"{speedup('s3') / speedup('local'):.2f}x"])  # fmt: skip
    print(table(rows, ["", "local disk", "S3 (SeaweedFS)", "S3 / local"]))
    fixed_requests, top_requests = counted["fixed"], counted["top"]
    kinds = [k for k in KINDS if any(b.get(k) for b in fixed_requests + top_requests)]
    req_rows = []
    for label, batches in (("fixed cost, factor 1", fixed_requests), (f"the job at factor {top}", top_requests)):
        counts = [f"{_median(batches, k):.0f}" for k in kinds]
        req_rows.append([f"{label} (median of {len(batches)})", *counts, f"{_median(batches):.0f}"])
    print()
    print(table(req_rows, ["S3 requests per micro-batch", *kinds, "all"]))
    third = max(1, len(fixed_requests) // 3)
    first, last = _median(fixed_requests[:third]), _median(fixed_requests[-third:])
    growth = last / first if first else None
    print(f"\nrequests per batch, last third of the fixed-cost batches over the first: {growth or 0:.2f}x")
    figures = {
        "s3_vs_local_batch_overhead": round(fixed["s3"] / fixed["local"], 3),
        "s3_vs_local_speedup_f8": round(speedup("s3") / speedup("local"), 3),
        "s3_requests_per_batch_f8": _median(top_requests),
        **{f"s3_{k.lower()}_per_batch_f8": _median(top_requests, k) for k in kinds},
        "s3_requests_per_batch_fixed": _median(fixed_requests),
        "s3_requests_growth": round(growth, 3) if growth else None,
        "local_batch_s": round(fixed["local"], 3),
        "s3_batch_s": round(fixed["s3"], 3),
        "speedup_f8_local": round(speedup("local"), 3),
        "speedup_f8_s3": round(speedup("s3"), 3),
        "top_factor": top,
    }
    print(json.dumps({"bench": "storage", "figures": figures}))
    return 0


def count_requests(args: Any) -> int:
    """The counting child: the fixed-cost batches and the top factor's job on a fresh S3 home, requests per batch."""
    from pipelines.runtime.session import build_session
    from pipelines.storage.home import Home
    from testbed.servers.s3_proxy import ProxyProcess

    top = max(int(f) for f in args.factors.split(","))
    proxy = ProxyProcess(None, os.environ["AWS_ENDPOINT_URL"])  # the parent's
    home = Home(f"s3://{os.environ['BENCH_STORAGE_BUCKET']}/counted")
    produce(home, "events", args.records, args.keys)
    produce(home, "tiny", args.fixed_batches * FIXED_BATCH_RECORDS, 20, seed=5)
    produce(home, "warmup", 2000, 20, seed=1)
    spark = build_session(f"local[{2 * top}]", app_name="bench-storage-count")
    requests = BatchRequests(proxy)
    spark.streams.addListener(requests.make())
    _run(spark, home, None, "warm", "warmup", top, 0, 400, 2000)
    _run(spark, home, None, "fixed", "tiny", 1, 0, FIXED_BATCH_RECORDS, args.fixed_batches * FIXED_BATCH_RECORDS)
    _run(spark, home, None, f"job_f{top}", "events", top, args.latency_ms, args.max_records, args.records)
    spark.stop()
    print(json.dumps({"fixed": requests.per_batch("fixed-v1"), "top": requests.per_batch(f"job_f{top}-v1")}))
    return 0


def _run(
    spark: Any, home: Any, listener: Any, name: str, stream: str, factor: int, latency_ms: float, max_records: int,
    produced: int,
) -> Any:  # fmt: skip
    run = run_elastic(spark, home, listener, name=name, stream=stream, factor=factor, latency_ms=latency_ms,
                      max_records=max_records, produced=produced, trigger_interval="0 seconds")  # fmt: skip
    _check(run)
    return run


def _check(run: Any) -> None:
    if run.lost or run.duplicated or run.violations:
        raise SystemExit(
            f"DATA-QUALITY FAILURE {run.mode} f{run.factor}: {run.lost} lost, {run.duplicated} duplicated, "
            f"{run.violations} order violations"
        )


if __name__ == "__main__":
    sys.exit(main())
