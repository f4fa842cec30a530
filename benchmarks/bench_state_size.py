"""How large a state a job serves on this machine when its memory is capped below the state's size.

A state of ``--keys`` keys (the example fold's columns) is written straight into the state's ``current`` table,
sorted by key hash as compaction writes it; then ``--records`` events over random keys of it arrive, and the job
(``include/jobs/customer-totals.yaml``, factor ``--factor``) runs them with ``pipelines run --available-now``
through spark-submit, its whole process tree (the JVM, its Python workers, the source runner) in a memory cgroup of
``--memory`` (cgroup v1's ``memory.limit_in_bytes``; page cache counts, and is given back under pressure). A state
larger than that limit is served from the tasks' memory-mapped bases on local disk, paged in as lookups touch it,
never loaded whole: the run must end well, and every touched key's state must be its old fold plus its new events.
Figures: the state's rows and bytes (in the home, and as the executors' bases), the run's wall time, the cgroup's
peak, the largest Python worker's peak resident memory, and the same run against a state of ``--baseline-keys`` as
the baseline (their ratio).

    python -m benchmarks.bench_state_size [--keys 20000000] [--memory 2g] [--records 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
from deltalake import CommitProperties

from pipelines.core import state as rules
from pipelines.core.hashing import hashes_of
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.runtime.session import spark_env
from pipelines.state import layout
from pipelines.state.compaction import write_files
from pipelines.state.durable import BATCH_KEY, SEGMENT_KEY, StateTables
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from pipelines.usage import Parser

REPO = Path(__file__).resolve().parents[1]
CHUNK = 1_000_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def write_state(home: Home, config: JobConfig, keys: int) -> int:
    """``keys`` rows (each key folded from one event) into ``current``, sorted by key hash; returns its bytes."""
    spec = config.state[0]
    schema = layout.current_schema(spec)
    log(f"hashing {keys:,} keys ...")
    hashes = np.empty(keys, dtype=np.int64)
    for start in range(0, keys, CHUNK):
        names = [f"key-{i}".encode() for i in range(start, min(keys, start + CHUNK))]
        hashes[start : start + len(names)] = hashes_of(names).astype(np.int64)
    order = np.argsort(hashes, kind="stable")
    now = int(time.time() * 1_000_000)

    def batches():  # type: ignore[no-untyped-def]
        for start in range(0, keys, CHUNK):
            ids = order[start : start + CHUNK]
            n = len(ids)
            yield pa.RecordBatch.from_pydict(
                {
                    rules.KEY: [f"key-{i}".encode() for i in ids.tolist()],
                    rules.KEY_HASH: hashes[ids],
                    "events": np.ones(n, np.int64),
                    "amount": (ids % 997 + 1).astype(np.int64),
                    "last_seq": np.zeros(n, np.int64),
                    rules.RECORDS: np.ones(n, np.int64),
                    rules.FIRST[0]: ["seed"] * n,  # not the input's stream: its records are all new to the rows
                    rules.FIRST[1]: (ids % 2).astype(np.int32),
                    rules.FIRST[2]: [str(i // 2) for i in ids.tolist()],
                    rules.LAST[0]: ["seed"] * n,
                    rules.LAST[1]: (ids % 2).astype(np.int32),
                    rules.LAST[2]: [str(i // 2) for i in ids.tolist()],
                    rules.UPDATED_AT: pa.array(np.full(n, now, np.int64)).cast(layout.TIME),
                    rules.HAS_VALUE: np.ones(n, bool),
                    rules.SEGMENT: np.zeros(n, np.int64),
                },
                schema=schema,
            )
            log(f"  wrote {min(keys, start + CHUNK):,} of {keys:,} rows")

    tables = StateTables(home, config.name, spec)
    adds = write_files(tables, batches())  # as compaction writes `current`: sorted by hash, disjoint files
    current = tables.current()
    current.create_write_transaction(
        adds,
        "append",
        current.schema(),
        commit_properties=CommitProperties(custom_metadata={SEGMENT_KEY: "0", BATCH_KEY: ""}),
    )
    return sum(a.size for a in adds)


def produce(home: Home, keys: int, records: int) -> Counter[int]:
    """``records`` events over random keys of the state (each key's seq going on from its one earlier event)."""
    rng = random.Random(7)
    touched: Counter[int] = Counter()
    batch = []
    for _ in range(records):
        k = rng.randrange(keys)
        touched[k] += 1
        value = {"key": f"key-{k}", "seq": touched[k], "amount": 1}
        batch.append((f"key-{k}".encode(), json.dumps(value).encode(), None))
    DeltaLog(home.streams).produce("events", batch)
    return touched


class Peaks(threading.Thread):
    """The largest resident memory of any Python worker under a process, sampled every 0.2 s."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.python_rss, self.tree_rss = root, 0, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.2):
            try:
                procs = [psutil.Process(self.root), *psutil.Process(self.root).children(recursive=True)]
                rss = [(p.name(), p.memory_info().rss) for p in procs]
            except psutil.Error:
                continue
            self.tree_rss = max(self.tree_rss, sum(r for _, r in rss))
            self.python_rss = max([self.python_rss, *(r for n, r in rss if n.startswith("python"))])


def cgroup(limit: int) -> Path:
    """A cgroup v1 memory group of ``limit`` bytes (swap none), for the run's process tree."""
    group = Path(f"/sys/fs/cgroup/memory/pipelines-bench-{os.getpid()}")
    group.mkdir()
    (group / "memory.limit_in_bytes").write_text(str(limit))
    swap = group / "memory.memsw.limit_in_bytes"
    if swap.exists():
        with contextlib.suppress(OSError):
            swap.write_text(str(limit))
    return group


def run_capped(home: Home, job: str, group: Path) -> tuple[int, float, dict[str, int]]:
    """``pipelines run JOB --available-now`` with its process tree in ``group``: exit code, seconds, peaks."""
    env = {**os.environ, **spark_env(), "PIPELINES_SPARK_MASTER": "local[2]"}
    argv = [sys.executable, "-m", "pipelines", "--home", str(home.root), "run", job, "--available-now"]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (group / "cgroup.procs").write_text(str(proc.pid))  # the tree it starts is born in the group
    peaks = Peaks(proc.pid)
    peaks.start()
    out, _ = proc.communicate(timeout=3600)
    peaks.halt.set()
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        log(out[-3000:])
    failcnt = int((group / "memory.failcnt").read_text())
    oom = (group / "memory.oom_control").read_text()
    return (
        proc.returncode,
        seconds,
        {
            "cgroup_peak": int((group / "memory.max_usage_in_bytes").read_text()),
            "tree_rss_peak": peaks.tree_rss,
            "python_rss_peak": peaks.python_rss,
            "limit_hits": failcnt,
            "oom_kills": int(next((x.split()[1] for x in oom.splitlines() if x.startswith("oom_kill ")), "0")),
        },
    )


def one(root: Path, keys: int, records: int, factor: int, limit: int) -> dict[str, float]:
    home = Home(root)
    DeltaLog(home.streams).create("events", 2)
    raw = JobConfig.load(REPO / "include/jobs/customer-totals.yaml").to_dict()
    raw.update(
        name="big",
        elasticity_factor=factor,
        process_options={"latency_ms": 0},
        sink={"table": "big_out"},
        dead_letter={"table": "big_dead"},
        batch={"max_records": 5000, "trigger_interval": "0 seconds"},
    )
    config = JobConfig.from_dict(raw)
    create_job(home, config)
    home_bytes = write_state(home, config, keys)
    touched = produce(home, keys, records)
    os.environ["PIPELINES_STATE_CACHE_DIR"] = str(root / "cache")
    group = cgroup(limit)
    try:
        code, seconds, peaks = run_capped(home, config.name, group)
    finally:
        group.rmdir()
    if code != 0:
        raise RuntimeError(f"the capped run of {keys:,} keys exited {code}")
    cache = sum(f.stat().st_size for f in (root / "cache").rglob("*.arrow"))
    sample = random.Random(3).sample(sorted(touched), min(200, len(touched)))
    tables = StateTables(home, config.name, config.state[0])
    changed = tables.read_changes(0, tables.segment()).select([rules.KEY, "events", rules.SEGMENT]).to_pylist()
    newest: dict[bytes, tuple[int, int]] = {}  # the touched keys' rows, from the changes alone: no read of it all
    for r in changed:
        if r[rules.KEY] not in newest or r[rules.SEGMENT] > newest[r[rules.KEY]][0]:
            newest[r[rules.KEY]] = (r[rules.SEGMENT], r["events"])
    wrong = [k for k in sample if newest.get(f"key-{k}".encode(), (0, None))[1] != 1 + touched[k]]
    if wrong:
        raise RuntimeError(f"{len(wrong)} of {len(sample)} touched keys hold a wrong fold, e.g. key-{wrong[0]}")
    in_current = sum(a["num_records"] for a in pa.table(tables.current().get_add_actions(flatten=True)).to_pylist())
    if in_current != keys or not set(newest) <= {f"key-{k}".encode() for k in touched}:
        raise RuntimeError(f"the state holds {in_current:,} keys in current, not {keys:,}, or rows for untouched keys")
    return {"keys": keys, "home_bytes": home_bytes, "cache_bytes": cache, "seconds": seconds, **peaks}


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=20_000_000)
    parser.add_argument("--baseline-keys", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--memory", default="2g", help="the run's memory cap: bytes, or with k, m, g")
    parser.add_argument("--dir", type=Path, help="where the homes and caches go (default: a temporary folder)")
    args = parser.parse_args()
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = args.memory.strip().lower()
    limit = int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)
    with tempfile.TemporaryDirectory(prefix="bench-state-size-", dir=args.dir) as tmp:
        results = {}
        for name, keys in (("baseline", args.baseline_keys), ("large", args.keys)):
            log(f"{name}: {keys:,} keys, {args.records:,} events, factor {args.factor}, memory capped at {args.memory}")
            results[name] = one(Path(tmp) / name, keys, args.records, args.factor, limit)
            r = results[name]
            log(
                f"  {r['seconds']:.1f}s; cgroup peak {r['cgroup_peak'] / 2**20:,.0f} MiB, largest Python worker "
                f"{r['python_rss_peak'] / 2**20:,.0f} MiB; state {r['home_bytes'] / 2**20:,.0f} MiB in the home, "
                f"{r['cache_bytes'] / 2**20:,.0f} MiB of bases"
            )
    head = ("state", "keys", "home MiB", "bases MiB", "run s", "cgroup MiB", "worker MiB")
    print("\n" + " ".join(f"{h:>12}" if i else f"{h:<9}" for i, h in enumerate(head)))
    for name, r in results.items():
        print(
            f"{name:<9} {int(r['keys']):>12,} {r['home_bytes'] / 2**20:>12,.0f} {r['cache_bytes'] / 2**20:>12,.0f} "
            f"{r['seconds']:>12.1f} {r['cgroup_peak'] / 2**20:>12,.0f} {r['python_rss_peak'] / 2**20:>12,.0f}"
        )
    large, base = results["large"], results["baseline"]
    figures = {
        "keys": args.keys,
        "memory_limit_bytes": limit,
        "state_home_bytes": int(large["home_bytes"]),
        "state_base_bytes": int(large["cache_bytes"]),
        "bases_over_limit": round(large["cache_bytes"] / limit, 2),
        "run_s": round(large["seconds"], 1),
        "run_vs_baseline": round(large["seconds"] / base["seconds"], 2),
        "cgroup_peak_bytes": int(large["cgroup_peak"]),
        "python_worker_peak_bytes": int(large["python_rss_peak"]),
        "oom_kills": int(large["oom_kills"]),
    }
    print(json.dumps({"bench": "state_size", "figures": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
