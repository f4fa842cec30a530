"""The demo producer: keyed JSON events with a per-key sequence number that never restarts.

The per-key ``seq`` is what lets the data-quality checks prove per-key order
end to end, across partition expansions (where offsets of one key live in two
partitions and only the producer knows their order).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pipelines.control.home import Home

PRODUCE_CHUNK = 5_000


PRODUCER_STATE_FORMAT = 1
SCAN_WINDOW = 50_000


def produce(
    log: Any,
    home: Home,
    stream: str,
    records: int,
    keys: int,
    seed: int | None,
    *,
    chunk: int = PRODUCE_CHUNK,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Append test records over keys ``key-0 .. key-<keys-1>``, continuing every key's sequence.

    Each value is ``{"key": "key-3", "seq": 17, "payload": "..."}``; the
    per-key ``seq`` is what lets data-quality checks prove per-key order end to
    end, so it must never repeat or restart. The next seq of a key therefore
    comes from the stream itself, which is the truth after a crash, another
    run or a deleted cache; ``<home>/producers/<stream>.json`` only remembers
    how far each partition has been scanned, so a run reads just the records
    added since the last one. Records are committed ``chunk`` at a time (one
    Delta commit each) with progress on stderr.
    """
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    state = _ProducerState.load(home, log, stream, progress)
    per_partition: Counter[int] = Counter()
    done = 0
    while done < records:
        n = min(chunk, records - done)
        batch = []
        for _ in range(n):
            key = f"key-{rng.randrange(keys)}"
            seq = state.next_seq.get(key, 0)
            state.next_seq[key] = seq + 1
            value = {"key": key, "seq": seq, "payload": rng.randbytes(8).hex()}
            batch.append((key.encode(), json.dumps(value, separators=(",", ":")).encode(), None))
        placed = log.produce(stream, batch)
        state.advance(placed)
        state.save()
        per_partition.update(p for p, _ in placed)
        done += n
        if records > chunk:
            progress(f"produced {done}/{records} records to {stream}")
    return {
        "stream": stream,
        "records": records,
        "keys": keys,
        "seed": seed,
        "per_partition": dict(sorted(per_partition.items())),
        "end_offsets": log.end_offsets(stream),
    }


class _ProducerState:
    """The next seq per key, and per partition the offset below which every record is accounted for.

    The cache is trusted only for the same Delta table (its id) and only up to
    offsets the stream still has; anything else is rescanned. Offsets another
    producer writes between our chunks are not "covered", so the next run
    rescans them; seqs of one key written by two concurrent producers have no
    order to prove anyway.
    """

    def __init__(self, path: Path, table_id: str, covered: dict[int, int], next_seq: dict[str, int]) -> None:
        self.path = path
        self.table_id = table_id
        self.covered = covered
        self.next_seq = next_seq

    @classmethod
    def load(cls, home: Home, log: Any, stream: str, progress: Callable[[str], None]) -> _ProducerState:
        from deltalake import DeltaTable

        meta = log.describe(stream)  # a StreamError naming the existing streams if there is no such stream
        table_id = str(DeltaTable(log.path(stream)).metadata().id)
        path = home.producers / f"{stream}.json"
        covered, next_seq = cls._cached(path, table_id)
        ranges = {p: (int(m.earliest), int(m.end)) for p, m in meta.partitions.items()}
        if any(p not in ranges or covered[p] > ranges[p][1] for p in covered):
            covered, next_seq = {}, {}  # the stream is not what the cache saw: trust only the stream
        state = cls(path, table_id, covered, next_seq)
        scanned = 0
        for p, (earliest, end) in sorted(ranges.items()):
            start = max(covered.get(p, earliest), earliest)
            for lo in range(start, end, SCAN_WINDOW):
                hi = min(lo + SCAN_WINDOW, end)
                state._learn(log.read(stream, p, lo, hi).column("value").to_pylist())
                scanned += hi - lo
            state.covered[p] = end
        if scanned > SCAN_WINDOW:
            progress(f"scanned {scanned} records of {stream} for the per-key sequence numbers")
        return state

    @staticmethod
    def _cached(path: Path, table_id: str) -> tuple[dict[int, int], dict[str, int]]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != PRODUCER_STATE_FORMAT or data.get("table_id") != table_id:
                return {}, {}
            return (
                {int(p): int(o) for p, o in data["covered"].items()},
                {str(k): int(n) for k, n in data["next_seq"].items()},
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}, {}  # no cache or a broken one: rescanning the stream is always correct

    def _learn(self, values: Iterable[bytes]) -> None:
        for raw in values:
            try:
                doc = json.loads(raw)
                key, seq = doc["key"], doc["seq"]
            except (ValueError, TypeError, KeyError):
                continue  # not one of ours: other producers may share the stream
            if isinstance(key, str) and isinstance(seq, int) and seq >= self.next_seq.get(key, 0):
                self.next_seq[key] = seq + 1

    def advance(self, placed: Iterable[tuple[int, int]]) -> None:
        spans: dict[int, list[int]] = {}
        for p, offset in placed:
            span = spans.setdefault(p, [offset, offset])
            span[0], span[1] = min(span[0], offset), max(span[1], offset)
        for p, (lo, hi) in spans.items():
            if self.covered.get(p) == lo:  # contiguous with what we know: nobody wrote in between
                self.covered[p] = hi + 1

    def save(self) -> None:
        data = {
            "format": PRODUCER_STATE_FORMAT,
            "table_id": self.table_id,
            "covered": {str(p): o for p, o in sorted(self.covered.items())},
            "next_seq": self.next_seq,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
        tmp.replace(self.path)
