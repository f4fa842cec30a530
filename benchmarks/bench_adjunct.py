"""Adjunct stores: bootstrap rate, batched lookups through the public API, memory per million entries.

``python -m benchmarks.bench_adjunct [--entries 1000000] [--lookups 1000000]``

* bootstrap: ``--entries`` distinct keys on the embedded log (2 partitions),
  read through the input-system protocol, extracted, and appended to the
  store's Delta changes, then compacted into a snapshot (what a fresh executor
  loads): entries/s over the whole bootstrap;
* build: a fresh executor's local base from that snapshot (no stream read);
* lookups: ``StoreView.get_many`` on random existing and missing keys, in
  Arrow batches of ``--batch`` keys, on one core;
* baseline in the same run: a Python dict of every entry (the hand-made
  cache), its build time, per-key lookups and its memory;
* memory: the local base's bytes per million entries (mapped, shared by a
  host's processes) against the dict's (``tracemalloc``, per process).

Progress on stderr, tables on stdout, one JSON line last.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipelines.adjunct.config import parse_stores
from pipelines.adjunct.ingest import AdjunctStores
from pipelines.adjunct.local import LocalEngine
from pipelines.adjunct.views import view_at
from pipelines.storage.home import Home
from pipelines.systems.registry import open_system
from pipelines.usage import Parser


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    parser = Parser(description=__doc__)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=32)
    args = parser.parse_args()
    n = args.entries
    with tempfile.TemporaryDirectory(prefix="bench-adjunct-") as tmp:
        home = Home(Path(tmp) / "home")
        log = open_system("deltalog", home)
        log.create("customers", 2)
        say(f"producing {n:,} entries")
        pad = b"x" * max(0, args.value_bytes - 12)
        keys = [f"customer-{i:09d}".encode() for i in range(n)]
        chunk = 200_000
        for start in range(0, n, chunk):
            log.produce(
                "customers", [(k, b"v%09d" % i + pad, None) for i, k in enumerate(keys[start : start + chunk], start)]
            )
        configs = list(parse_stores({"c": {"input": "customers", "bootstrap": True, "batch_records": 500_000}}))

        say("bootstrapping")
        t0 = time.perf_counter()
        stores = AdjunctStores.open(home, "bench", configs, {"deltalog": log})
        done = stores.bootstrap()["c"]
        bootstrap_s = time.perf_counter() - t0
        assert done.changes == n, f"bootstrap stored {done.changes} of {n}"
        version = stores.current()["c"]

        say("building a fresh executor's base from the snapshot")
        engine = LocalEngine(Path(tmp) / "local")
        t0 = time.perf_counter()
        view = view_at(engine, home, "bench", configs[0], version)
        build_s = time.perf_counter() - t0
        base_bytes = sum(p.stat().st_size for p in (Path(tmp) / "local").rglob("*.arrow"))

        rng = np.random.default_rng(7)
        picks = rng.integers(0, n, args.lookups)
        missing = rng.random(args.lookups) < 0.1
        query = [keys[i] if not m else b"absent-%d" % i for i, m in zip(picks, missing, strict=True)]
        batches = [pa.array(query[i : i + args.batch], pa.binary()) for i in range(0, len(query), args.batch)]
        say(f"{args.lookups:,} lookups in batches of {args.batch:,}")
        t0 = time.perf_counter()
        found = 0
        for b in batches:
            values = view.get_many(b)
            found += len(values) - values.null_count
        lookup_s = time.perf_counter() - t0
        assert found == int((~missing).sum()), "every existing key is found, no missing one"

        say("baseline: a dict of everything")
        tracemalloc.start()
        t0 = time.perf_counter()
        table = {k: b"v%09d" % i + pad for i, k in enumerate(keys)}
        dict_build_s = time.perf_counter() - t0
        dict_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        t0 = time.perf_counter()
        get = table.get
        dict_found = 0
        for b in batches:
            out = pa.array([get(k) for k in b.to_pylist()], pa.binary())
            dict_found += len(out) - out.null_count
        dict_lookup_s = time.perf_counter() - t0
        assert dict_found == found

    figures = {
        "entries": n,
        "bootstrap_entries_per_s": round(n / bootstrap_s),
        "bootstrap_s": round(bootstrap_s, 2),
        "executor_build_s": round(build_s, 2),
        "lookups_keys_per_s": round(args.lookups / lookup_s),
        "dict_lookups_keys_per_s": round(args.lookups / dict_lookup_s),
        "dict_build_s": round(dict_build_s, 2),
        "base_mb_per_million": round(base_bytes / n * 1e6 / 2**20, 1),
        "dict_mb_per_million": round(dict_bytes / n * 1e6 / 2**20, 1),
    }
    print("| figure | value |\n|---|---|")
    for name, value in figures.items():
        print(f"| {name} | {value:,} |")
    print(json.dumps({"bench": "adjunct", "figures": figures}))


if __name__ == "__main__":
    main()
