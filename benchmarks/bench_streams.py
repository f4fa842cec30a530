"""Benchmark of the embedded log's upkeep: what compaction saves a reader, and what a trim and a compaction cost.

    python -m benchmarks.bench_streams [--commits 1000] [--records 20] [--value-bytes 100]

One stream of 2 partitions on local disk, fed by ``--commits`` producer commits of ``--records`` records each
(one file per partition per commit, the small-files case). Then, each timed as the median of 5 fresh readers
(a new ``DeltaLog``: its first look at the log, then every record of both partitions read in offset order):

* **small files**: the stream as produced; the in-run baseline;
* **compacted**: after ``DeltaLog.compact`` (the defaults of ``pipelines stream compact``);

and the cost of the upkeep itself: the compaction, and a trim of the older half of the records (by a time taken
halfway through the commits), run on a second copy of the stream still made of small files, so it removes as
many files as a trim of a stream nobody compacts would.

Figures (the last line, JSON): ``read_small_ms``, ``read_compacted_ms`` and their ratio ``read_small_vs_compacted``;
``compact_s`` and ``compact_vs_read_small`` (the compaction against one read of the small files), ``trim_s``
and ``trim_files``. Every read is checked to return every offset once, in order, with its value.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_runtime import table
from pipelines.core.segments import COMPACT_SPAN_MS, COMPACT_TARGET_BYTES
from pipelines.systems.deltalog import DeltaLog
from pipelines.usage import Parser

STREAM = "events"


def say(message: str) -> None:
    print(f"[streams] {message}", file=sys.stderr, flush=True)


def fill(root: Path, commits: int, records: int, pad: bytes) -> int:
    """The stream, ``commits`` commits of ``records`` records; the time (ms) halfway through the commits."""
    log = DeltaLog(root)
    log.create(STREAM, 2)
    half = 0
    for c in range(commits):
        log.produce(STREAM, [(f"k{c}-{i}".encode(), b"%d-%d" % (c, i) + pad, None) for i in range(records)])
        if c == commits // 2 - 1:
            time.sleep(0.01)
            half = int(time.time() * 1000)
            time.sleep(0.01)
        if (c + 1) % max(1, commits // 10) == 0:
            say(f"{root.name}: {c + 1:,}/{commits:,} commits")
    return half


def read_all(root: Path, expected: dict[int, list[bytes]]) -> tuple[float, float]:
    """Median of 5 fresh readers: (first look at the log, reading every record) in ms; every record checked."""
    looks, reads = [], []
    for _ in range(5):
        log = DeltaLog(root)
        t0 = time.perf_counter()
        meta = log.describe(STREAM)
        t1 = time.perf_counter()
        for p, part in meta.partitions.items():
            rows = log.read_range(STREAM, p, int(part.earliest), int(part.end))
            assert rows["offset"].to_pylist() == list(range(int(part.earliest), int(part.end))), f"partition {p}"
            assert rows["value"].to_pylist() == expected[p][int(part.earliest) :], f"partition {p}: values"
        looks.append((t1 - t0) * 1000)
        reads.append((time.perf_counter() - t1) * 1000)
    return statistics.median(looks), statistics.median(reads)


def main() -> None:
    parser = Parser(description=__doc__)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--records", type=int, default=20)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    pad = b"x" * max(0, args.value_bytes - 8)
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as tmp:
        small, trimmed = Path(tmp) / "small", Path(tmp) / "trimmed"
        say(f"producing {args.commits:,} commits of {args.records} records, twice")
        fill(small, args.commits, args.records, pad)
        half = fill(trimmed, args.commits, args.records, pad)
        log = DeltaLog(small)
        ends = log.end_offsets(STREAM)
        expected = {p: log.read_range(STREAM, p, 0, ends[p])["value"].to_pylist() for p in ends}

        say("reading the small files")
        look_small, read_small = read_all(small, expected)
        say("compacting")
        t0 = time.perf_counter()
        done = DeltaLog(small).compact(STREAM, COMPACT_TARGET_BYTES, COMPACT_SPAN_MS)
        compact_s = time.perf_counter() - t0
        say("reading the compacted files")
        look_compacted, read_compacted = read_all(small, expected)

        say("trimming the older half of the other copy")
        t0 = time.perf_counter()
        trim = DeltaLog(trimmed).trim(STREAM, half, {})
        trim_s = time.perf_counter() - t0
        trimmed_log = DeltaLog(trimmed)
        kept = {
            p: trimmed_log.read_range(STREAM, p, int(m.earliest), int(m.end))["value"].to_pylist()
            for p, m in trimmed_log.describe(STREAM).partitions.items()
        }
        assert all(kept[p] == expected[p][len(expected[p]) - len(kept[p]) :] for p in kept), "the newer half, intact"

    files_before = sum(done.files_before.values())
    files_after = sum(done.files_after.values())
    print(
        table(
            [
                ["small files", f"{files_before:,}", f"{look_small:.0f}", f"{read_small:.0f}"],
                ["compacted", f"{files_after:,}", f"{look_compacted:.0f}", f"{read_compacted:.0f}"],
            ],
            ["stream", "files", "first look ms", "read all ms"],
        )
    )
    print(f"compaction {compact_s:.2f} s; trim of the older half: {trim.files:,} files in {trim_s:.2f} s")
    figures = {
        "commits": args.commits,
        "files_small": files_before,
        "files_compacted": files_after,
        "read_small_ms": round(read_small, 1),
        "read_compacted_ms": round(read_compacted, 1),
        "read_small_vs_compacted": round(read_small / read_compacted, 1),
        "look_small_ms": round(look_small, 1),
        "look_compacted_ms": round(look_compacted, 1),
        "compact_s": round(compact_s, 2),
        "compact_vs_read_small": round(compact_s * 1000 / read_small, 2),
        "trim_s": round(trim_s, 2),
        "trim_files": trim.files,
    }
    print(json.dumps({"bench": "streams", "figures": figures}))


if __name__ == "__main__":
    main()
