"""A state's tables and caches without Spark: segments committed as a batch would, compaction into several files,
retirement, and each fraction's base built from a `current` of many files, found key by key."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from pipelines.core import state as rules
from pipelines.core.adjunct import Fraction
from pipelines.state import compaction
from pipelines.state.cache import StateCache
from pipelines.state.durable import StateConflictError, StateTables, disjoint
from pipelines.state.inspect import state_at
from pipelines.state.task import StateVersions, TaskStates
from pipelines.storage.home import Home

pytestmark = pytest.mark.integration

SPEC = rules.make_spec("totals", "events BIGINT", [("events", "bigint")])


def batch(home: Home, tables: StateTables, keys: list[bytes], factor: int, bucket: int, segment: int, n: int) -> None:
    """One virtual task's batch over ``keys`` (its bucket's), committed as segment ``segment + 1``."""
    task = TaskStates(
        home,
        "job",
        [SPEC],
        StateVersions({"totals": segment}, 10**15 + n),
        factor=factor,
        bucket=bucket,
        model_version=1,
        batch_id=n,
        cache=StateCache(home.root.local_path() / f"cache-{n}"),
    )
    task.load(keys)
    for i, key in enumerate(keys):
        task.begin()
        seen = task.api.get(key) or {"events": 0}
        task.api.put(key, {"events": seen["events"] + 1})
        task.commit([(key, "events", 0, str(n * 10_000 + i))])
    files = task.finish()["totals"]
    assert tables.commit(files, previous=segment, app_id="job/v1/q", batch_id=n, time_us=10**15 + n) == segment + 1


def test_many_segments_compacted_into_many_disjoint_files_keep_one_row_per_key(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "FILE_BYTES", 8 * 1024)  # a few hundred rows a file: many files
    monkeypatch.setattr(compaction, "BATCH_ROWS", 100)
    tables = StateTables(home, "job", SPEC)
    tables.ensure()
    keys = [f"key-{i}".encode() for i in range(3000)]
    rng = random.Random(5)
    counts = dict.fromkeys(keys, 0)
    for n in range(6):
        chosen = rng.sample(keys, 800)
        for key in chosen:
            counts[key] += 1
        batch(home, tables, chosen, 1, 0, n, n)
        if n in (2, 4, 5):
            done = compaction.compact(home, "job", SPEC)
            assert done is not None and done.segment == n + 1
    files = sorted(
        pa.table(tables.current().get_add_actions(flatten=True)).to_pylist(), key=lambda a: a["min.key_hash"]
    )
    assert len(files) > 5 and disjoint(files), "compaction writes files in hash order, each range in one file"
    rows = state_at(home, "job", SPEC, None).to_pylist()
    assert len(rows) == len({r["key"] for r in rows}) == sum(1 for c in counts.values() if c)
    assert all(r["events"] == r["_records"] == counts[r["key"]] for r in rows)
    # the changes the older kept version of `current` folded in are retired; the newer ones stay
    assert tables.oldest_segment() is not None and tables.oldest_segment() > 3


@pytest.mark.parametrize("factor", [1, 3, 4])
def test_a_fractions_base_from_many_files_finds_every_key_of_it(
    home: Home, monkeypatch: pytest.MonkeyPatch, factor: int
) -> None:
    monkeypatch.setattr(compaction, "FILE_BYTES", 8 * 1024)
    monkeypatch.setattr(compaction, "BATCH_ROWS", 100)
    tables = StateTables(home, "job", SPEC)
    tables.ensure()
    keys = [f"key-{i}".encode() for i in range(2500)]
    batch(home, tables, keys, 1, 0, 0, 0)
    compaction.compact(home, "job", SPEC)
    from pipelines.core.hashing import key_hash

    for bucket in range(factor):
        mine = [k for k in keys if key_hash(k, 0) % factor == bucket]
        part = StateCache(home.root.local_path() / f"reader-{factor}").part(
            tables, Fraction(bucket, factor), tables.segment(), stats=_Stats()
        )
        found = part.lookup(mine, _hashes(mine))
        assert sorted(found) == sorted(mine), f"bucket {bucket} of {factor}: {len(found)} of {len(mine)} found"


def test_a_batch_planned_on_an_older_segment_is_refused(home: Home) -> None:
    tables = StateTables(home, "job", SPEC)
    tables.ensure()
    batch(home, tables, [b"a"], 1, 0, 0, 0)
    with pytest.raises(StateConflictError, match="planned on segment 0: another driver wrote it"):
        batch(home, tables, [b"b"], 1, 0, 0, 1)


def _hashes(keys: list[bytes]) -> object:
    from pipelines.state.cache import hashes_of

    return hashes_of(keys)


class _Stats:
    def __init__(self) -> None:
        self.keys_looked_up = self.rows_found = self.bytes_from_home = self.rows_from_home = self.base_builds = 0


def test_keys_sharing_a_hash_are_found_across_a_batch_edge() -> None:
    """Two keys with one 32-bit murmur3 hash, the run of that hash cut by a batch's edge: both are found."""
    from pipelines.state.cache import Base, hashes_of
    from pipelines.state.layout import current_schema

    keys = [f"k{i}".encode() for i in range(300_000)]
    hashes = hashes_of(keys)
    order = np.argsort(hashes, kind="stable")
    same = np.nonzero(np.diff(hashes[order]) == 0)[0]
    assert len(same), "300,000 keys give a few pairs sharing a 32-bit hash (about 10 expected)"
    a, b = order[same[0]], order[same[0] + 1]
    rows = sorted([(int(hashes[i]), keys[i]) for i in range(0, 300_000, 1000)] + [(int(hashes[a]), keys[a])])
    rows += [(int(hashes[b]), keys[b])]
    rows.sort(key=lambda r: r[0])
    cut = next(i for i, (h, _) in enumerate(rows) if h == int(hashes[a])) + 1  # between the pair
    schema = current_schema(SPEC)
    table = pa.Table.from_pylist(
        [
            {"key": k, "key_hash": h, "events": n, "_records": n, "_has_value": True, "_segment": 1}
            for n, (h, k) in enumerate(rows)
        ],
        schema=schema,
    )
    batches = [*table.slice(0, cut).to_batches(), *table.slice(cut).to_batches()]
    base = Base(Fraction(0, 1), 1, batches, None)
    wanted = [keys[a], keys[b], rows[0][1], rows[-1][1]]
    found = base.lookup(wanted, hashes_of(wanted))
    assert sorted(found) == sorted(wanted)
    assert {found[k]["key"] for k in wanted} == set(wanted)
