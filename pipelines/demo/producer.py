"""The demo producer: keyed JSON events with a per-key sequence number that never restarts.

The per-key ``seq`` is what lets the data-quality checks prove per-key order
end to end, across partition expansions (where offsets of one key live in two
partitions and only the producer knows their order).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from pipelines.core.positions import Bounded
from pipelines.storage.home import Home
from pipelines.storage.location import Location
from pipelines.storage.objects import ObjectStore
from pipelines.systems.base import InputSystem

PRODUCE_CHUNK = 5_000
RATE_TICK_S = 0.5
"""A producer at a rate appends twice a second: each append is a commit, and fewer, larger ones read faster."""


PRODUCER_STATE_FORMAT = 2
SCAN_WINDOW = 50_000


def produce(
    system: InputSystem,
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

    Each value is ``{"key": "key-3", "seq": 17, "amount": 412, "payload": "..."}``; the
    per-key ``seq`` is what lets data-quality checks prove per-key order end to
    end, so it must never repeat or restart. The next seq of a key therefore
    comes from the stream itself, which is the truth after a crash, another
    run or a deleted cache; ``<home>/producers/<system>/<stream>.json`` only
    remembers how far each partition has been scanned, so a run reads just the
    records added since the last one (its own included). Records are appended
    ``chunk`` at a time with progress on stderr.

    The cache is written once, after the scan: the positions it holds cannot
    move past this run's own records (another producer's may be interleaved
    with them), so a save after each chunk rewrote the same positions with a
    larger ``next_seq`` that the next run learns from the stream anyway. Over
    a million keys those rewrites were two thirds of a run's time, more at each
    run as the cache grew.
    """
    events = KeyedEvents.open(system, home, stream, keys, seed, progress=progress)
    per_partition: Counter[int] = Counter()
    done = 0
    while done < records:
        n = min(chunk, records - done)
        per_partition.update(events.append(n))
        done += n
        if records > chunk:
            progress(f"produced {done}/{records} records to {stream}")
    return _summary(system, stream, records, keys, events.seed, per_partition)


def produce_at_rate(
    system: InputSystem,
    home: Home,
    stream: str,
    rate: int,
    seconds: float,
    keys: int,
    seed: int | None,
    *,
    progress: Callable[[str], None] = lambda message: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """``rate`` records a second for ``seconds``, in two appends a second: load to watch a job keep up with and to
    rescale under (what the demo's producer does), with the same records and summary as ``produce``."""
    events = KeyedEvents.open(system, home, stream, keys, seed, progress=progress)
    tick = RATE_TICK_S
    per_partition: Counter[int] = Counter()
    done, started = 0, clock()
    said = started
    while (now := clock()) - started < seconds:
        due = min(int(rate * (now - started + tick)), int(rate * seconds)) - done  # on schedule, never past the end
        if due > 0:
            per_partition.update(events.append(due))
            done += due
        if clock() - said >= 5:
            said = clock()
            progress(f"produced {done} records to {stream} ({done / max(said - started, 1e-9):.0f}/s)")
        sleep(max(0.0, tick - (clock() - now)))
    return _summary(system, stream, done, keys, events.seed, per_partition)


def _summary(
    system: InputSystem, stream: str, records: int, keys: int, seed: int, per_partition: Counter[int]
) -> dict[str, Any]:
    """What a produce did, as ``stream produce`` prints it."""
    return {
        "stream": stream,
        "records": records,
        "keys": keys,
        "seed": seed,
        "per_partition": dict(sorted(per_partition.items())),
        "end_offsets": system.end_positions(stream),
    }


class KeyedEvents:
    """One producer's run of keyed events: every key's next ``seq``, learnt from the stream once, then kept.

    A continuous producer (the demo's, four appends a second) opens it once: learning the seqs again before every
    append re-read the records it had just written, and that scan (with the log listings under it) was most of the
    demo driver's CPU, taken from the job it was feeding.
    """

    def __init__(self, system: InputSystem, stream: str, keys: int, seed: int, state: _ProducerState) -> None:
        self.system, self.stream, self.keys, self.seed = system, stream, keys, seed
        self.rng = random.Random(seed)
        self.state = state

    @classmethod
    def open(
        cls,
        system: InputSystem,
        home: Home,
        stream: str,
        keys: int,
        seed: int | None,
        *,
        progress: Callable[[str], None] = lambda message: None,
    ) -> KeyedEvents:
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 32)
        state = _ProducerState.load(home, system, stream, progress)
        state.save()  # what the scan learnt; saved once: the records this run adds are scanned by the next
        return cls(system, stream, keys, seed, state)

    def append(self, n: int) -> list[int]:
        """Append ``n`` events over random keys; the partition each landed in."""
        rng, next_seq = self.rng, self.state.next_seq
        batch = []
        for _ in range(n):
            key = f"key-{rng.randrange(self.keys)}"
            seq = next_seq.get(key, 0)
            next_seq[key] = seq + 1
            value = {"key": key, "seq": seq, "amount": rng.randrange(1, 1000), "payload": rng.randbytes(8).hex()}
            batch.append((key.encode(), json.dumps(value, separators=(",", ":")).encode(), None))
        return [p for p, _ in self.system.produce(self.stream, batch)]


class _ProducerState:
    """The next seq per key, and per partition the position up to which the stream has been scanned for them.

    The cache is trusted only for the same stream (its id, where the system
    gives one) and only for positions the stream still has; anything else is
    rescanned. Records another producer writes between our calls are scanned
    by the next run, so no seq is ever reused.
    """

    def __init__(
        self, store: ObjectStore, path: Location, stream_id: str, covered: dict[int, str], next_seq: dict[str, int]
    ) -> None:
        self.store = store
        self.path = path
        self.stream_id = stream_id
        self.covered = covered
        self.next_seq = next_seq

    @classmethod
    def load(cls, home: Home, system: InputSystem, stream: str, progress: Callable[[str], None]) -> _ProducerState:
        meta = system.describe(stream)  # a StreamError naming the existing streams if there is no such stream
        stream_id = f"{meta.system}:{meta.details.get('id', stream)}"
        path = home.producers / meta.system / f"{stream}.json"
        covered, next_seq = cls._cached(home.store, path, stream_id)
        for p, position in list(covered.items()):
            part = meta.partitions.get(p)
            if part is None or system.position_key(position) < system.position_key(part.earliest):
                covered, next_seq = {}, {}  # the stream is not what the cache saw: trust only the stream
                break
            if not system.reached(stream, p, part.end, position):
                covered, next_seq = {}, {}
                break
        state = cls(home.store, path, stream_id, covered, next_seq)
        scanned = 0
        for p, part in sorted(meta.partitions.items()):
            position = covered.get(p, part.earliest)
            while not system.reached(stream, p, position, part.end):
                got = system.read(stream, p, position, Bounded(position, SCAN_WINDOW))
                state._learn(got.records.column("value").to_pylist())
                scanned += got.records.num_rows
                if got.records.num_rows == 0:
                    break
                position = got.next_position
            state.covered[p] = position
        if scanned > SCAN_WINDOW:
            progress(f"scanned {scanned} records of {stream} for the per-key sequence numbers")
        return state

    @staticmethod
    def _cached(store: ObjectStore, path: Location, stream_id: str) -> tuple[dict[int, str], dict[str, int]]:
        try:
            data = json.loads(store.read(path))
            if data.get("format") != PRODUCER_STATE_FORMAT or data.get("stream_id") != stream_id:
                return {}, {}
            return (
                {int(p): str(o) for p, o in data["covered"].items()},
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

    def save(self) -> None:
        data = {
            "format": PRODUCER_STATE_FORMAT,
            "stream_id": self.stream_id,
            "covered": {str(p): o for p, o in sorted(self.covered.items())},
            "next_seq": self.next_seq,
        }
        self.store.write(self.path, json.dumps(data, separators=(",", ":")).encode())
