"""The embedded Delta log against real deltalake tables: dense offsets under concurrency, pruned reads, expansion."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.pool import Pool
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.core.partitioner import kafka_partition
from pipelines.core.segments import RETAIN_FOREVER
from pipelines.errors import ConfigError, DamagedTableError, PartitionChangeError, StreamError
from pipelines.systems.base import InputSystem, SupportsIdentity
from pipelines.systems.deltalog import DeltaLog
from pipelines.systems.deltalog.layout import LOG_SCHEMA, SYSTEM
from pipelines.systems.deltalog.retention import Trim

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def producers() -> Iterator[Pool]:
    """Producer processes shared by the concurrency tests, started once: spawning and importing is the slow part.

    deltalake's Rust runtime does not survive fork, hence spawn.
    """
    with multiprocessing.get_context("spawn").Pool(4, initializer=_warm_up) as pool:
        pool.map(_ready, range(4), chunksize=1)  # wait until the workers are up, so tests time only their work
        yield pool


def _warm_up() -> None:
    # pyarrow imports pandas on its first conversion; pay for it before the tests' producers race.
    pa.array([0])


def _ready(_: int) -> None:
    time.sleep(0.1)


def _keyed(n: int, prefix: str = "k", start: int = 0) -> list[tuple[bytes | None, bytes, dict[str, str] | None]]:
    return [(f"{prefix}{i}".encode(), f"v{i}".encode(), None) for i in range(start, start + n)]


def _offsets_by_partition(log: DeltaLog, stream: str) -> dict[int, list[int]]:
    table = DeltaTable(log.path(stream)).to_pyarrow_table(columns=["partition", "offset"])
    found: dict[int, list[int]] = {}
    for p, o in zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True):
        found.setdefault(p, []).append(o)
    return {p: sorted(o) for p, o in found.items()}


def _produce_commits(root: str, stream: str, worker: int, commits: int, size: int) -> list[tuple[bytes, int, int]]:
    """A producer process: returns (value, partition, offset) for every record it was told it wrote."""
    log = DeltaLog(root)
    placed = []
    for c in range(commits):
        records = [(f"w{worker}-{c}-{i}".encode(), f"w{worker}-{c}-{i}".encode(), None) for i in range(size)]
        for (_, value, _), (p, o) in zip(records, log.produce(stream, records), strict=True):
            placed.append((value, p, int(o)))
    return placed


def _produce_across_expansion(root: str, stream: str, worker: int, size: int) -> int:
    """Keeps producing until it has committed three times under the expanded count (or gives up)."""
    log = DeltaLog(root)
    after = 0
    for c in range(300):
        log.produce(stream, [(f"w{worker}-{c}-{i}".encode(), b"x", None) for i in range(size)])
        if len(log.end_offsets(stream)) > 2:
            after += 1
            if after == 3:
                return c + 1
    raise AssertionError("the expansion never became visible to the producer")


def test_concurrent_producers_in_several_processes_keep_offsets_dense_and_unique(
    tmp_path: Path, producers: Pool
) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 3)
    workers, commits, size = 4, 10, 50
    results = producers.starmap(
        _produce_commits, [(str(tmp_path), "events", w, commits, size) for w in range(workers)], chunksize=1
    )

    offsets = _offsets_by_partition(log, "events")
    assert sum(len(o) for o in offsets.values()) == workers * commits * size
    for p, found in offsets.items():
        assert found == list(range(len(found))), f"partition {p} offsets are not dense and unique"
    assert log.end_offsets("events") == {p: len(offsets.get(p, [])) for p in range(3)}

    # What each producer was told matches what is stored, and keys sit where Kafka would put them.
    stored = {}
    for p in offsets:
        t = log.read_range("events", p, 0, len(offsets[p]))
        stored.update({v: (p, o) for v, o in zip(t["value"].to_pylist(), t["offset"].to_pylist(), strict=True)})
    told = {value: (p, o) for placed in results for value, p, o in placed}
    assert told == stored
    assert all(p == kafka_partition(value, 3) for value, (p, _) in told.items())


def test_producers_racing_an_expansion_never_write_old_placements_past_the_expansion_point(
    tmp_path: Path, producers: Pool
) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    pending = producers.starmap_async(
        _produce_across_expansion, [(str(tmp_path), "events", w, 20) for w in range(2)], chunksize=1
    )
    deadline = time.monotonic() + 30
    while sum(log.end_offsets("events").values()) < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    meta = log.expand("events", 4)
    pending.get(timeout=60)

    point = {p: int(o) for p, o in meta.expansions[0].end_offsets.items()}
    assert point.keys() == {0, 1} and sum(point.values()) >= 40
    for found in _offsets_by_partition(log, "events").values():
        assert found == list(range(len(found)))
    for p in range(4):
        t = log.read_range("events", p, 0, log.end_offsets("events")[p])
        for key, offset in zip(t["key"].to_pylist(), t["offset"].to_pylist(), strict=True):
            if p >= 2 or offset >= point[p]:
                # written under 4 partitions
                assert kafka_partition(key, 4) == p, (p, offset, point)
            else:
                assert kafka_partition(key, 2) == p
    # Before the point, partition p held keys that now belong to p + 2: the expansion really moved keys.
    before = log.read_range("events", 0, 0, point[0])
    assert any(kafka_partition(k, 4) == 2 for k in before["key"].to_pylist())


def test_range_read_returns_exactly_the_range_in_offset_order(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("one", 1)
    for c in range(5):
        log.produce("one", [(None, f"r{c * 10 + i}".encode(), {"i": str(i)}) for i in range(10)])

    t = log.read_range("one", 0, 15, 37)
    assert t.schema == LOG_SCHEMA
    assert t["offset"].to_pylist() == list(range(15, 37))
    assert t["value"].to_pylist() == [f"r{o}".encode() for o in range(15, 37)]
    assert t["partition"].to_pylist() == [0] * 22
    assert t["headers"][0].as_py() == '{"i":"5"}'
    assert t["timestamp"].null_count == 0
    assert log.read_range("one", 0, 20, 20).num_rows == 0
    assert log.read_range("one", 0, 0, 50)["offset"].to_pylist() == list(range(50))
    with pytest.raises(StreamError, match="ends at offset 50"):
        log.read_range("one", 0, 40, 51)
    with pytest.raises(StreamError, match="not 1"):
        log.read_range("one", 1, 0, 1)
    with pytest.raises(StreamError, match="after end"):
        log.read_range("one", 0, 30, 20)


def test_range_read_opens_only_files_that_overlap_the_range(tmp_path: Path) -> None:
    writer = DeltaLog(tmp_path)
    writer.create("one", 1)
    writer.create("two", 2)
    for _ in range(10):
        writer.produce("one", [(None, b"x", None)] * 10)  # one file of ten offsets per commit
        writer.produce("two", [(None, b"y", None)] * 2)  # round-robin: one record per partition per commit

    log = DeltaLog(tmp_path)  # a fresh reader: planning works from the Delta log alone
    selected = log.files_for_range("one", 0, 15, 37)
    assert [Path(f).name.split("-")[0] for f in selected] == [f"{o:020d}" for o in (10, 20, 30)]
    assert all(f.startswith("partition=0/") for f in selected)
    assert len(log.files_for_range("one", 0, 20, 30)) == 1
    assert len(log.files_for_range("one", 0, 0, 100)) == 10
    assert log.files_for_range("one", 0, 7, 7) == []
    two = log.files_for_range("two", 1, 3, 5)
    assert len(two) == 2 and all(f.startswith("partition=1/") for f in two)

    # Remove every data file the plan did not select: the read still succeeds, so it opened no other file.
    table_dir = Path(log.path("one"))
    for data_file in table_dir.glob("partition=*/*.parquet"):
        if str(data_file.relative_to(table_dir)) not in selected:
            data_file.unlink()
    assert log.read_range("one", 0, 15, 37)["offset"].to_pylist() == list(range(15, 37))


def test_expansion_keeps_old_data_readable_and_new_records_use_the_new_count(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    stale = DeltaLog(tmp_path)  # another producer, whose cached snapshot predates the expansion
    stale.produce("events", _keyed(100))
    before = {p: log.read_range("events", p, 0, e) for p, e in log.end_offsets("events").items()}

    meta = log.expand("events", 4)
    assert sorted(meta.partitions) == [0, 1, 2, 3]
    assert {p: log.read_range("events", p, 0, int(before[p].num_rows)) for p in (0, 1)} == before

    records = _keyed(200, prefix="new")
    placed = stale.produce("events", records)
    assert {p for p, _ in placed} == {0, 1, 2, 3}
    for (key, _, _), (p, _) in zip(records, placed, strict=True):
        assert key is not None and p == kafka_partition(key, 4)
    ends = log.end_offsets("events")
    counts = Counter(p for p, _ in placed)
    assert ends == {p: before[p].num_rows + counts[p] if p < 2 else counts[p] for p in range(4)}
    # New records continue the old partitions' offsets; new partitions start at 0.
    assert min(int(o) for p, o in placed if p == 0) == before[0].num_rows
    assert min(int(o) for p, o in placed if p == 3) == 0


@pytest.mark.parametrize(("target", "message"), [(1, "never removed"), (3, "not a multiple"), (5, "not a multiple")])
def test_shrink_or_non_multiple_expansion_is_refused_and_changes_nothing(
    tmp_path: Path, target: int, message: str
) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    log.produce("events", _keyed(10))
    version = DeltaTable(log.path("events")).version()
    before = log.describe("events")

    with pytest.raises(PartitionChangeError, match=message):
        log.expand("events", target)

    assert DeltaLog(tmp_path).describe("events") == before
    assert DeltaTable(log.path("events")).version() == version
    assert log.expand("events", 2) == before  # the current count is a no-op, not a commit
    assert DeltaTable(log.path("events")).version() == version
    with pytest.raises(ConfigError):
        log.expand("events", 0)
    with pytest.raises(ConfigError, match="at most 100,000"):  # refused at once, not minutes into building it
        log.expand("events", 2 * 10**8)
    assert DeltaTable(log.path("events")).version() == version
    with pytest.raises(ConfigError, match="at most 100,000"):
        log.create("huge", 10**8)
    assert not Path(str(log.path("huge"))).exists()


def test_expansion_point_is_the_end_offsets_at_expansion_and_is_durable(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 1)
    log.produce("events", _keyed(7))
    log.expand("events", 2)
    first_ends = log.end_offsets("events")
    log.produce("events", _keyed(30, prefix="b"))
    second_ends = log.end_offsets("events")
    log.expand("events", 6)

    history = DeltaLog(tmp_path).describe("events").expansions  # a fresh process sees it too
    assert [(e.from_partitions, e.to_partitions) for e in history] == [(1, 2), (2, 6)]
    assert history[0].end_offsets == {0: "7"}
    assert first_ends == {0: 7, 1: 0}
    assert history[1].end_offsets == {p: str(o) for p, o in second_ends.items()}
    assert history[0].at <= history[1].at and history[1].at.tzinfo is not None
    assert [history[1].source_partition(p) for p in history[1].new_partitions()] == [0, 1, 0, 1]


def test_describe_reports_earliest_and_end_per_partition(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    assert isinstance(log, InputSystem)
    meta = log.create("events", 3)
    assert meta.system == SYSTEM and meta.stream == "events" and meta.partition_count == 3
    assert {p: (m.earliest, m.end) for p, m in meta.partitions.items()} == {p: ("0", "0") for p in range(3)}

    placed = log.produce("events", _keyed(50)) + log.produce("events", [(None, b"n", None)] * 6)
    counts = Counter(p for p, _ in placed)
    meta = log.describe("events")
    assert {p: (m.earliest, m.end) for p, m in meta.partitions.items()} == {p: ("0", str(counts[p])) for p in range(3)}
    assert Counter(p for p, _ in placed[50:]) == {0: 2, 1: 2, 2: 2}  # null keys round-robin
    assert log.position_key("10") > log.position_key("9")


def test_metadata_survives_a_checkpoint_and_the_log_is_the_only_source(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    for c in range(3):
        log.produce("events", _keyed(20, start=20 * c))
    log.expand("events", 4)
    log.produce("events", _keyed(20, prefix="z"))
    DeltaTable(log.path("events")).create_checkpoint()
    for log_file in Path(log.path("events"), "_delta_log").glob("*.json"):
        log_file.unlink()  # only the checkpoint remains to read from

    fresh = DeltaLog(tmp_path)
    assert fresh.describe("events") == log.describe("events")
    assert fresh.end_offsets("events") == log.end_offsets("events")
    assert fresh.read_range("events", 1, 0, 5)["offset"].to_pylist() == list(range(5))


def test_produce_of_ten_thousand_records_writes_one_file_per_partition(tmp_path: Path) -> None:
    """One bulk write per partition, not a file per record (speed is for benchmarks, not tests)."""
    log = DeltaLog(tmp_path)
    log.create("bulk", 4)
    records = [(f"key-{i}".encode(), os.urandom(64), {"n": str(i)}) for i in range(10_000)]
    placed = log.produce("bulk", records)
    assert len(placed) == 10_000
    assert sum(log.end_offsets("bulk").values()) == 10_000
    assert len(list(Path(log.path("bulk")).glob("partition=*/*.parquet"))) == 4  # one file per partition


def test_errors_name_the_problem(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    with pytest.raises(StreamError, match="existing streams: none"):
        log.describe("missing")
    log.create("orders", 1)
    log.create("clicks", 1)
    assert log.list_streams() == ["clicks", "orders"]
    with pytest.raises(StreamError, match=r"'missing' does not exist.*existing streams: clicks, orders"):
        log.read_range("missing", 0, 0, 0)
    with pytest.raises(StreamError, match="already exists"):
        log.create("orders", 2)
    for bad in (0, -1, True, "2"):
        with pytest.raises(ConfigError):
            log.create("other", bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="stream name"):
        log.create("no/slashes", 1)
    with pytest.raises(StreamError, match="value must be bytes"):
        log.produce("orders", [(b"k", "text", None)])  # type: ignore[list-item]
    with pytest.raises(StreamError, match="key must be bytes"):
        log.produce("orders", [("k", b"v", None)])  # type: ignore[list-item]
    with pytest.raises(StreamError, match="headers"):
        log.produce("orders", [(b"k", b"v", {"n": 1})])  # type: ignore[dict-item]
    assert log.end_offsets("orders") == {0: 0}
    assert log.produce("orders", []) == []
    with pytest.raises(StreamError, match="decimal"):
        log.position_key("abc")


def test_a_pickled_log_drops_its_table_handles_and_still_works(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    log.produce("events", _keyed(10))
    clone = pickle.loads(pickle.dumps(log))
    assert clone.end_offsets("events") == log.end_offsets("events")
    parts = [clone.read_range("events", p, 0, e) for p, e in clone.end_offsets("events").items()]
    assert pa.concat_tables(parts).num_rows == 10


def test_the_embedded_log_keeps_the_input_system_contract(tmp_path: Path) -> None:
    from pipelines.systems.base import SupportsStartAtTime
    from tests.integration.systems.contract import check_input_system_contract

    log = DeltaLog(tmp_path)
    log.create("events", 3)
    check_input_system_contract(log, "events", abilities=frozenset({SupportsStartAtTime, SupportsIdentity}))


def test_an_expansion_holds_new_partitions_until_their_source_is_past_the_point(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    log.produce("events", _keyed(40))
    log.expand("events", 4)
    point = log.describe("events").expansions[0].end_offsets
    at_start = {0: "0", 1: "0", 2: "0", 3: "0"}
    assert log.read_limits("events", at_start) == {2: None, 3: None}
    past_0 = {**at_start, 0: point[0]}
    assert log.read_limits("events", past_0) == {3: None}
    assert log.read_limits("events", {p: log.end_positions("events")[p] for p in range(4)}) == {}


def test_a_read_waits_out_storage_that_went_away_and_returns_the_range(tmp_path: Path) -> None:
    """The stream's directory vanishes (a mount gone) before a read and comes back: the read waits, then answers."""
    root = tmp_path / "streams"
    log = DeltaLog(root, read_timeout_s=30)
    log.create("events", 2)
    log.produce("events", _keyed(40))
    ends = log.end_offsets("events")
    away = tmp_path / "away"
    root.rename(away)
    with pytest.raises(StreamError, match="its storage is unavailable"):
        log.end_offsets("events")  # planning: an outage, at once (the job's source backs off on it)
    restore = threading.Timer(1.5, lambda: away.rename(root))
    restore.start()
    t0 = time.monotonic()
    result = pickle.loads(pickle.dumps(log)).read("events", 0, "0", str(ends[0]))  # as an executor has it
    restore.join()
    assert time.monotonic() - t0 >= 1.4, "the read waited for the storage"
    assert result.records.column("offset").to_pylist() == [str(o) for o in range(ends[0])]
    assert log.end_offsets("events") == ends, "planning answers again"


def test_a_read_gives_up_on_storage_gone_for_longer_than_its_timeout_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "streams"
    log = DeltaLog(root, read_timeout_s=0.5)
    log.create("events", 1)
    log.produce("events", _keyed(5))
    root.rename(tmp_path / "away")
    with pytest.raises(StreamError, match=r"its storage is unavailable .* a read waited 0.5s for it"):
        log.read("events", 0, "0", "5")


def test_a_missing_data_file_in_a_table_whose_log_is_there_is_damage_not_an_outage(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path, read_timeout_s=30)
    log.create("events", 1)
    log.produce("events", _keyed(5))
    for data in Path(log.path("events")).rglob("*.parquet"):
        data.unlink()
    t0 = time.monotonic()
    with pytest.raises(DamagedTableError, match="is missing"):
        log.read("events", 0, "0", "5")
    assert time.monotonic() - t0 < 5, "damage is reported at once, not waited on"


def test_a_start_time_inside_a_compacted_file_is_found_in_its_rows(tmp_path: Path) -> None:
    """Compaction (``OPTIMIZE``, allowed on an append-only table) merges commits of different times into one file,
    so the time falls inside it: its rows, not its statistics, say where the first record at or after it is."""
    log = DeltaLog(tmp_path)
    log.create("events", 1)
    marks = []
    for batch in range(3):
        log.produce("events", [(b"k", f"{batch}-{i}".encode(), None) for i in range(4)])
        time.sleep(0.02)
        marks.append(int(time.time() * 1000))
        time.sleep(0.02)
    DeltaTable(log.path("events")).optimize.z_order(["offset"])  # compact() would not keep the offset order
    log = DeltaLog(tmp_path)  # a fresh view of the compacted table
    assert len(DeltaTable(log.path("events")).file_uris()) == 1, "one file holds all three commits"
    assert log.positions_at("events", 0) == {0: "0"}
    assert [log.positions_at("events", m) for m in marks] == [{0: "4"}, {0: "8"}, {0: "12"}]
    assert log.read("events", 0, "4", "8").records.column("value").to_pylist() == [f"1-{i}".encode() for i in range(4)]


class Beside(threading.Thread):
    """A thread that keeps what it raised, so the test fails on it instead of pytest merely warning."""

    def __init__(self, target: Callable[[], None]) -> None:
        super().__init__(target=target)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as error:
            self.error = error


def check_trim(log: DeltaLog) -> None:
    """The embedded log's retention on any storage: whole old files from the front, the last file and unread records
    kept, the files deleted from storage, readers told what happened, producers numbering on, append-only again."""
    log.create("events", 2)
    marks = []
    for batch in range(3):
        log.produce("events", _keyed(8, f"b{batch}-"))
        time.sleep(0.02)
        marks.append(int(time.time() * 1000))
        time.sleep(0.02)
    ends = log.end_offsets("events")
    stale = DeltaLog(log.root)
    assert stale.read("events", 0, "0", "1").records.num_rows == 1  # a reader whose snapshot predates the trim

    planned = log.trim("events", marks[1], {}, dry_run=True)
    assert planned.version is None and [p.files for p in planned.partitions] == [2, 2]
    assert log.describe("events").partitions[0].earliest == "0", "a dry run changes nothing"

    held = log.trim("events", marks[1], {1: 1})  # a reader of partition 1 has not read offset 1 yet
    firsts = {p.partition: p.earliest for p in held.partitions}
    assert [p.stop for p in held.partitions] == ["newer", "unread"] and held.partitions[1].files == 0
    assert {p: int(m.earliest) for p, m in log.describe("events").partitions.items()} == firsts
    assert firsts[0] == held.records > 0 and firsts[1] == 0
    assert log.end_offsets("events") == ends, "the end offsets stay"
    assert DeltaTable(log.path("events")).metadata().configuration.get("delta.appendOnly") == "true"
    data_files = [e.name for e in log.store.list(log.location("events") / "partition=0")]
    assert len(data_files) == 1, f"the removed files are deleted from storage: {data_files}"

    rows = log.read("events", 0, str(firsts[0]), str(ends[0])).records
    assert rows.num_rows == ends[0] - firsts[0]
    for reader in (log, stale):
        with pytest.raises(StreamError, match=r"partition 0 no longer holds offset 0: it starts at \d+ \(retention"):
            reader.read("events", 0, "0", str(ends[0]))

    everything = log.trim("events", marks[-1] + 60_000, {})  # even a time after every record keeps the last files
    assert [p.stop for p in everything.partitions] == ["last file", "last file"]
    log.produce("events", _keyed(6, "after-"))
    after = _offsets_by_partition(log, "events")
    for p, offsets in after.items():
        assert offsets == list(range(offsets[0], log.end_offsets("events")[p])), "dense from the new earliest"
    assert log.trim("events", marks[-1] + 60_000, {}).files == 2, "the next trim removes the old last files"


def test_a_trim_removes_old_files_from_the_front_and_keeps_what_readers_need(tmp_path: Path) -> None:
    check_trim(DeltaLog(tmp_path))


def test_a_trim_racing_producers_loses_no_record_and_leaves_offsets_dense(tmp_path: Path) -> None:
    """A producer committing all along: the trims go through beside it, and no record gets a gap, a duplicate or an
    end offset that moved back."""
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    for batch in range(6):
        log.produce("events", _keyed(10, f"old{batch}-"))
    produced = 60
    stop = threading.Event()

    def keep_producing() -> None:
        nonlocal produced
        writer = DeltaLog(tmp_path)
        while not stop.is_set():
            writer.produce("events", _keyed(4, "racing-", produced))
            produced += 4

    thread = Beside(keep_producing)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while produced < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        before = produced
        trims: list[Trim] = []

        def trim_thrice() -> None:
            trimmer = DeltaLog(tmp_path)  # a second trimmer beside this one: the two race each other too
            for _ in range(3):
                trims.append(trimmer.trim("events", int(time.time() * 1000), {}))
                time.sleep(0.05)

        other = Beside(trim_thrice)
        other.start()
        trim_thrice()
        other.join(timeout=60)
        assert other.error is None, other.error
        for retention in (86_400_000, RETAIN_FOREVER, 3_600_000):  # metadata commits racing the producer too
            assert log.set_retention("events", retention).details["retention_ms"] == retention
        during = produced - before
    finally:
        stop.set()
        thread.join(timeout=60)
    assert thread.error is None, thread.error
    assert during > 0, "the producer committed while the trims ran"
    earliest = {p: int(m.earliest) for p, m in log.describe("events").partitions.items()}
    assert sum(t.records for t in trims) == sum(earliest.values()) > 60, "each record was trimmed once, by one trim"
    offsets = _offsets_by_partition(log, "events")
    ends = log.end_offsets("events")
    assert sum(ends.values()) == produced, "every record produced got its offset"
    for p, have in offsets.items():
        assert have == list(range(have[0], ends[p])), f"partition {p} dense from its earliest"
    assert DeltaTable(log.path("events")).metadata().configuration.get("delta.appendOnly") == "true"
    assert DeltaLog(tmp_path).retention("events") == 3_600_000


def check_compact(log: DeltaLog) -> None:
    """The embedded log's compaction on any storage: runs of small files become one, bounded by size and time span;
    every record keeps its offset, its order and its fields; readers with an older snapshot read on; the old files
    leave storage; the table stays append-only."""
    log.create("events", 2)
    for commit in range(4):
        log.produce("events", [(f"a{commit}-{i}".encode(), f"v{i}".encode(), {"n": str(i)}) for i in range(20)])
    time.sleep(1.5)  # the second group of commits is more than the span from the first
    mark = int(time.time() * 1000)
    for commit in range(4):
        log.produce("events", [(f"b{commit}-{i}".encode(), f"w{i}".encode(), None) for i in range(20)])
    ends = log.end_offsets("events")
    before = {p: log.read_range("events", p, 0, ends[p]) for p in ends}
    at_mark = log.positions_at("events", mark)
    stale = DeltaLog(log.root)
    stale.read("events", 0, "0", "1")  # caches the snapshot of the small files

    planned = log.compact("events", 64 * 1024 * 1024, 1_000, dry_run=True)
    assert planned.files_before == {0: 8, 1: 8} and planned.files_after == {0: 2, 1: 2}, planned
    assert len(DeltaTable(log.path("events")).file_uris()) == 16, "a dry run changes nothing"
    done = log.compact("events", 64 * 1024 * 1024, 1_000)
    assert done.files_after == {0: 2, 1: 2} and len(done.runs) == 4
    assert len(DeltaTable(log.path("events")).file_uris()) == 4
    stored = [e for p in ends for e in log.store.list(log.location("events") / f"partition={p}")]
    assert len(stored) == 4, f"the merged files left storage: {[e.name for e in stored]}"

    fresh = DeltaLog(log.root)
    for reader in (log, fresh, stale):
        for p in ends:
            assert reader.read_range("events", p, 0, ends[p]).equals(before[p]), "every record as it was, in order"
    assert fresh.end_offsets("events") == ends and fresh.positions_at("events", mark) == at_mark
    assert DeltaTable(log.path("events")).metadata().configuration.get("delta.appendOnly") == "true"
    again = log.compact("events", 64 * 1024 * 1024, 1_000)
    assert again.runs == [] and again.files_after == {0: 2, 1: 2}, "nothing left to merge"


def test_compaction_merges_small_files_and_keeps_every_offset_and_its_order(tmp_path: Path) -> None:
    check_compact(DeltaLog(tmp_path))


TRIM_AGE_MS = 500
"""The racing trim removes whatever is older than this, every 50 ms: files leave the log while a compaction that
took them in its runs is reading and writing them, the race under test, and a merge of younger files can still land.
With two CPU-bound processes beside it, 10 compactions' runs: 200 ms, 1-2 merged and 8-13 lost to the trim; 500 ms,
6-7 merged and 3-4 lost; 1,000 ms, 10 merged and none lost (no race left)."""


def test_compaction_racing_a_producer_and_a_trim_keeps_every_remaining_record_as_produced(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    produced: dict[tuple[int, int], bytes] = {}

    def put(writer: DeltaLog, records: list[tuple[bytes | None, bytes, dict[str, str] | None]]) -> None:
        for (p, o), (_, value, _) in zip(writer.produce("events", records), records, strict=True):
            produced[p, int(o)] = value

    for commit in range(10):
        put(log, _keyed(6, f"c{commit}-"))
    stop = threading.Event()

    def keep_producing() -> None:
        writer = DeltaLog(tmp_path)
        n = 0
        while not stop.is_set():
            put(writer, _keyed(4, f"r{n}-"))
            n += 1

    def keep_trimming() -> None:
        trimmer = DeltaLog(tmp_path)
        while not stop.is_set():
            trimmer.trim("events", int(time.time() * 1000) - TRIM_AGE_MS, {})
            time.sleep(0.05)

    threads = [Beside(keep_producing), Beside(keep_trimming)]
    for t in threads:
        t.start()
    try:
        # At least 5 compactions, and on until one merged something: on a loaded machine a compaction can take
        # longer than its files live, and lose every race of a fixed few to the trim (none merged in a 3-worker run).
        merged, attempts, deadline = 0, 0, time.monotonic() + 60
        while attempts < 5 or (merged == 0 and time.monotonic() < deadline):
            merged += len(log.compact("events", 64 * 1024 * 1024, 60_000).runs)
            attempts += 1
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert [t.error for t in threads] == [None, None]
    assert merged > 0, "some runs were merged while the others committed"
    reader = DeltaLog(tmp_path)
    for p, meta in reader.describe("events").partitions.items():
        first, end = int(meta.earliest), int(meta.end)
        rows = reader.read_range("events", p, first, end)
        assert rows["offset"].to_pylist() == list(range(first, end))
        assert rows["value"].to_pylist() == [produced[p, o] for o in range(first, end)], f"partition {p} as produced"


def test_a_streams_id_is_its_delta_table_id_also_once_log_cleanup_removed_the_first_commit(tmp_path: Path) -> None:
    log = DeltaLog(tmp_path)
    log.create("events", 2)
    for i in range(3):
        log.produce("events", [(f"k{i}".encode(), b"v", None)])
    table = DeltaTable(log.path("events"))
    assert log.identity("events") == table.metadata().id  # read from the first commit alone
    table.create_checkpoint()
    (tmp_path / "events" / "_delta_log" / f"{0:020d}.json").unlink()  # what log cleanup does past its retention
    assert log.identity("events") == table.metadata().id  # from the checkpoint, by delta-rs
    with pytest.raises(StreamError, match="does not exist"):
        log.identity("nothing")
