"""The Kinesis system against kinesis-mock (a real Kinesis emulator, started once for this module).

The reads below drive the system the way the runtime does: ``advance`` with
every slot's checkpoint in view, one ``read`` per slot with the ``Bounded``
end it answered, the next checkpoint from the read, and a replay of the same
read with the pinned end (what a replayed micro-batch does).
"""

from __future__ import annotations

import itertools
import json
import pickle
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber

from pipelines.core.shards import SHARD_END
from pipelines.errors import ConfigError, StreamError
from pipelines.systems.base import (
    Bounded,
    InputSystem,
    Position,
    SupportsLineage,
    SupportsRecordsRead,
    SupportsRelayout,
    SupportsStartAtTime,
)
from pipelines.systems.kinesis import KinesisSystem, position_key, validate_settings
from pipelines.systems.kinesis.positions import SlotPosition, decode_slot
from pipelines.systems.registry import open_system
from testbed.servers.kinesis_emulator import KinesisEmulator
from tests.integration.systems.contract import check_input_system_contract
from tests.integration.systems.kpl import AGGREGATE, kpl_pack

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # the Kinesis emulator (Node)

_names = itertools.count()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with KinesisEmulator() as url:
        yield url


@pytest.fixture
def kinesis(endpoint: str) -> Iterator[KinesisSystem]:
    # Faster than Kinesis' 5 GetRecords calls/s per shard, so the tests stay short; the limiter is the same code.
    system = KinesisSystem({"endpoint_url": endpoint, "region": "us-east-1", "get_records_per_second": 100.0})
    yield system
    system.close()


def _stream(system: KinesisSystem, shards: int) -> str:
    name = f"s{next(_names)}"
    system.create(name, shards)
    return name


def _keyed(start: int, n: int, keys: int = 11) -> list[tuple[bytes, bytes, None]]:
    return [(f"key-{i % keys}".encode(), f"{i}".encode(), None) for i in range(start, start + n)]


Read = list[tuple[int, str, bytes, bytes]]


def _round(system: InputSystem, stream: str, positions: dict[int, Position], per_slot: int, *, over: int = 0) -> Read:
    """One micro-batch over every slot: plan, read, replay with the pinned end (same records), advance.

    ``over``: how far a read may pass ``per_slot`` (a KPL aggregate's user records less one: none is cut).
    """
    ends = system.advance(stream, positions, dict.fromkeys(positions, per_slot), {})
    got = []
    for slot in sorted(positions):
        end = ends[slot]
        assert isinstance(end, Bounded)
        first = system.read(stream, slot, positions[slot], end)
        again = system.read(stream, slot, positions[slot], first.next_position)  # the replay of a pinned batch
        assert again.records.column("offset").to_pylist() == first.records.column("offset").to_pylist()
        assert again.next_position == first.next_position
        assert first.records.num_rows <= per_slot + over
        positions[slot] = first.next_position
        t = first.records
        columns = [t.column(c).to_pylist() for c in ("offset", "key", "value")]
        got += zip([slot] * t.num_rows, *columns, strict=True)
    return got


def _check_once_and_in_key_order(read: list[tuple[int, str, bytes, bytes]], produced: int) -> None:
    values = [int(v) for _, _, _, v in read]
    assert sorted(values) == list(range(produced)), "every record read exactly once"
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for _, _, key, value in read:
        by_key[key].append(int(value))
    for key, seen in by_key.items():
        assert seen == sorted(seen), f"key {key!r} read out of order: {seen}"
    # The record positions order each key's records as the input did (the per-key order check relies on it).
    order = sorted(read, key=lambda r: position_key(r[1]))
    for key in by_key:
        assert [int(v) for _, _, k, v in order if k == key] == by_key[key]


def _drain(kinesis: KinesisSystem, stream: str, positions: dict[int, Position], per_slot: int) -> Read:
    """Rounds until one reads nothing."""
    read: Read = []
    for _ in range(20):
        batch = _round(kinesis, stream, positions, per_slot)
        read += batch
        if not batch:
            break
    return read


def _split_while_reading(
    kinesis: KinesisSystem,
    stream: str,
    positions: dict[int, Position],
    shard: str,
    per_step: int,
    *,
    per_slot: int,
    over: int = 0,
    kpl: bool = False,
) -> tuple[int, Read]:
    """Six steps of producing ``per_step`` records and reading a round, ``shard`` split after the second."""
    produced, read = 0, []
    for step in range(6):
        records = _keyed(produced, per_step)
        records = kpl_pack(kinesis, stream, records) if kpl else records
        kinesis.produce(stream, records)
        produced += per_step
        if step == 1:
            kinesis.split_shard(stream, shard)
        read += _round(kinesis, stream, positions, per_slot, over=over)
    return produced, read


def test_the_kinesis_system_keeps_the_input_system_contract(kinesis: KinesisSystem) -> None:
    stream = _stream(kinesis, 2)
    assert isinstance(kinesis, InputSystem)
    check_input_system_contract(
        kinesis,
        stream,
        abilities=frozenset({SupportsRelayout, SupportsRecordsRead, SupportsLineage, SupportsStartAtTime}),
    )


def test_split_and_merge_while_producing_read_every_record_once_in_per_key_order(
    kinesis: KinesisSystem, endpoint: str
) -> None:
    stream = _stream(kinesis, 2)
    positions = {p: m.earliest for p, m in kinesis.describe(stream).partitions.items()}
    assert len(positions) == 2
    produced, read = 0, []
    for step in range(14):
        kinesis.produce(stream, _keyed(produced, 40))
        produced += 40
        if step == 2:  # split shard 0 while its slot is mid-way through it
            children = kinesis.split_shard(stream, "shardId-000000000000")
            assert children == ["shardId-000000000002", "shardId-000000000003"]
        if step == 5:  # merge the split's upper child with shard 1: two parents in different slots
            assert kinesis.merge_shards(stream, "shardId-000000000003", "shardId-000000000001") == (
                "shardId-000000000004"
            )
        if step == 7:  # a restart: a new client with nothing cached but the checkpoints
            kinesis = KinesisSystem(pickle.loads(pickle.dumps(kinesis)).settings)
        read += _round(kinesis, stream, positions, per_slot=25)
    for _ in range(30):
        batch = _round(kinesis, stream, positions, per_slot=50)
        read += batch
        if not batch and not any(s == SHARD_END for p in positions.values() for s in decode_slot(p).shards.values()):
            break
    _check_once_and_in_key_order(read, produced)
    # Both slots read: three shards were open at once on two slots, so one slot held two shards (1:n).
    assert {slot for slot, _, _, _ in read} == {0, 1}
    shards_by_slot = defaultdict(set)
    for slot, offset, _, _ in read:
        shards_by_slot[slot].add(offset.split(":")[0])
    assert max(len(s) for s in shards_by_slot.values()) >= 2
    # Children were read only after their parents' last record: per slot, shard ordinals never go back.
    lineage = kinesis.lineage(stream, positions)
    assert lineage["shardId-000000000004"]["parents"] == ["shardId-000000000003", "shardId-000000000001"]
    assert all(v["state"] in ("reading", "retired", "finished") for v in lineage.values())


def test_relayout_after_a_split_switches_to_one_slot_per_open_shard_without_loss_or_duplicates(
    kinesis: KinesisSystem,
) -> None:
    stream = _stream(kinesis, 2)
    positions = {p: m.earliest for p, m in kinesis.describe(stream).partitions.items()}
    produced, read = _split_while_reading(kinesis, stream, positions, "shardId-000000000001", 30, per_slot=20)
    assert any(len(decode_slot(p).unfinished()) > 1 for p in positions.values()), "the split left a 1:n slot"
    count = kinesis.describe(stream).partition_count
    assert count == 3
    switched = kinesis.relayout(stream, positions, count)  # the 1:1 model's start checkpoints
    assert sorted(switched) == [0, 1, 2]
    assert all(len(decode_slot(p).unfinished()) <= 1 for p in switched.values())
    assert decode_slot(switched[0]).encode() == switched[0]  # restored exactly
    kinesis.produce(stream, _keyed(produced, 60))
    produced += 60
    read += _drain(kinesis, stream, switched, per_slot=40)
    _check_once_and_in_key_order(read, produced)


def test_an_expired_iterator_is_acquired_again_from_the_checkpoint(kinesis: KinesisSystem) -> None:
    """kinesis-mock's iterators live 5 minutes like Kinesis'; the first GetRecords is answered as expired instead."""
    stream = _stream(kinesis, 1)
    kinesis.produce(stream, _keyed(0, 20))
    start = kinesis.describe(stream).partitions[0].earliest
    expired = []

    def expire_once(**_: Any) -> Any:
        if expired:
            return None  # every later call goes to the emulator
        expired.append(1)
        error = {"Error": {"Code": "ExpiredIteratorException", "Message": "Iterator expired"}}
        return (AWSResponse("", 400, {}, None), {**error, "ResponseMetadata": {"HTTPStatusCode": 400}})

    events = kinesis.client.meta.events
    events.register_first("before-call.kinesis.GetRecords", expire_once, unique_id="expire-once")
    try:
        got = kinesis.read(stream, 0, start, Bounded(start, 20))
    finally:
        events.unregister("before-call.kinesis.GetRecords", unique_id="expire-once")
    assert expired and got.stats["iterator_renewals"] == 1
    assert [int(v) for v in got.records.column("value").to_pylist()] == list(range(20))


def test_throttling_backs_off_is_counted_and_gives_up_with_the_reason() -> None:
    """kinesis-mock never throttles, so botocore's Stubber answers ProvisionedThroughputExceededException here."""
    system = KinesisSystem(
        # an endpoint nothing listens on: every call below is answered by the Stubber
        {"endpoint_url": "http://127.0.0.1:9", "region": "us-east-1", "backoff_base_s": 0.01, "max_attempts": 3}
    )
    start = '{"n":0,"shards":{"shardId-000000000000":"TRIM_HORIZON"}}'
    throttled = {"service_error_code": "ProvisionedThroughputExceededException", "http_status_code": 400}
    record = {
        "SequenceNumber": "49590338271490256608559692538361571095921575989136588898",
        "PartitionKey": "k",
        "Data": b"v",
        "ApproximateArrivalTimestamp": datetime(2026, 11, 23, tzinfo=UTC),
    }
    with Stubber(system.client) as stub:
        stub.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
        stub.add_client_error("get_records", **throttled)
        stub.add_client_error("get_records", **throttled)
        stub.add_response("get_records", {"Records": [record], "NextShardIterator": "it-2", "MillisBehindLatest": 0})
        got = system.read("s", 0, start, Bounded(start, 1))
        stub.assert_no_pending_responses()
    assert got.records.column("value").to_pylist() == [b"v"]
    assert got.stats["throttled"] == 2
    assert decode_slot(got.next_position).shards == {"shardId-000000000000": record["SequenceNumber"]}

    with Stubber(system.client) as stub:
        stub.add_response("get_shard_iterator", {"ShardIterator": "it-3"})
        for _ in range(3):
            stub.add_client_error("get_records", **throttled)
        with pytest.raises(
            StreamError, match=r"refused 3 times in a row \(ProvisionedThroughputExceededException.*faster"
        ):
            system.read("s", 0, start, Bounded(start, 1))


def test_a_kinesis_quota_is_named_in_kinesis_words_not_blamed_on_the_read_rate(endpoint: str) -> None:
    """``LimitExceededException`` is a rate or a quota; a stream of 100,000 shards was told its shards were read
    too fast."""
    quick = KinesisSystem({"endpoint_url": endpoint, "region": "us-east-1", "backoff_base_s": 0.01, "max_attempts": 2})
    try:
        with pytest.raises(StreamError) as refused:
            quick.create(f"s{next(_names)}", 100_000)
    finally:
        quick.close()
    said = str(refused.value)
    assert "LimitExceededException: The shard count must be between 1 and 1000" in said, said
    assert "a Kinesis limit" in said and "faster" not in said, said


def test_errors_name_the_stream_and_what_to_do(kinesis: KinesisSystem) -> None:
    with pytest.raises(StreamError, match="'missing' does not exist"):
        kinesis.describe("missing")
    stream = _stream(kinesis, 1)
    with pytest.raises(StreamError, match="already exists"):
        kinesis.create(stream, 1)
    with pytest.raises(StreamError, match="reshard"):
        kinesis.expand(stream, 2)
    with pytest.raises(StreamError, match="partition key"):
        kinesis.produce(stream, [(None, b"v", None)])
    with pytest.raises(ConfigError, match="credentials never go in the job YAML"):
        validate_settings({"aws_secret_access_key": "x"})
    with pytest.raises(ConfigError, match="did you mean 'region'"):
        validate_settings({"regoin": "eu-west-1"})
    with pytest.raises(StreamError, match="not a kinesis position"):
        position_key("12")


def test_the_registry_opens_it_with_the_job_settings(endpoint: str, tmp_path: Any) -> None:
    from pipelines.storage.home import Home

    system = open_system("kinesis", Home(tmp_path), {"endpoint_url": endpoint, "region": "us-east-1"})
    assert isinstance(system, KinesisSystem) and system.settings.endpoint_url == endpoint


def test_a_streams_retention_period_is_set_at_create_raised_lowered_and_reset(
    kinesis: KinesisSystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stream create/alter --retention`` on Kinesis: Increase/DecreaseStreamRetentionPeriod as the AWS CLI calls
    them, whole hours from 24 h to 365 days, ``default`` back to 24 h; what Kinesis cannot keep changes nothing."""
    day = 86_400_000
    name = f"s{next(_names)}"
    created = kinesis.create(name, 1, 2 * day)
    assert created.details["retention_hours"] == 48 and kinesis.retention(name) == 2 * day
    assert kinesis.set_retention(name, 7 * day).details["retention_hours"] == 168, "raised"
    lowered = kinesis.set_retention(name, 3 * day)
    assert lowered.details["retention_hours"] == 72 and lowered.details["retention_ms"] == 3 * day, "lowered"
    calls: list[str] = []
    call = kinesis.admin.client.call

    def counted(stream: str, operation: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(operation)
        return call(stream, operation, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(kinesis.admin.client, "call", counted)
        assert kinesis.set_retention(name, 3 * day).details["retention_hours"] == 72
    assert not [c for c in calls if "retention_period" in c], f"the same period: no change asked, {calls}"
    for bad in (-1, 12 * 3_600_000, 366 * day, 3 * day + 1):
        with pytest.raises(ConfigError):
            kinesis.set_retention(name, bad)
    assert kinesis.retention(name) == 3 * day, "a refused period changes nothing"
    assert kinesis.set_retention(name, None).details["retention_hours"] == 24, "default: Kinesis's 24 h"
    before = set(kinesis.client.list_streams()["StreamNames"])
    with pytest.raises(ConfigError):
        kinesis.create(f"s{next(_names)}", 1, -1)
    assert set(kinesis.client.list_streams()["StreamNames"]) == before, "a refused create makes no stream"


def test_the_cli_sets_and_shows_a_kinesis_streams_retention_period(endpoint: str, tmp_path: Any) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    settings = json.dumps({"endpoint_url": endpoint, "region": "us-east-1"})
    name = f"s{next(_names)}"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
        argv = [sys.executable, "-m", "pipelines", "--home", str(tmp_path / "home"), "stream", *args]
        return subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)

    made = cli("create", name, "--partitions", "1", "--system", "kinesis", "--settings", settings, "--retention", "2d")
    assert made.returncode == 0 and f"stream kinesis.{name}: 1 partitions, retention 2d" in made.stdout, made
    altered = cli("alter", name, "--system", "kinesis", "--settings", settings, "--retention", "default")
    assert altered.returncode == 0 and "retention 1d" in altered.stdout, altered
    refused = cli("alter", name, "--system", "kinesis", "--settings", settings, "--retention", "forever")
    assert refused.returncode == 2 and refused.stderr.startswith("error: ") and "never forever" in refused.stderr
    shown = cli("describe", name, "--system", "kinesis", "--settings", settings)
    assert shown.returncode == 0 and "retention 1d" in shown.stdout, shown
    missing = cli("alter", "nope", "--system", "kinesis", "--settings", settings, "--retention", "2d")
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "nope" in missing.stderr, missing
    assert len(missing.stderr.splitlines()) == 1, missing.stderr


def test_records_trimmed_before_they_were_read_stop_the_read_with_the_shard_and_range() -> None:
    """kinesis-mock keeps records at least 24 h, so the Stubber answers as Kinesis does once they are trimmed."""
    system = KinesisSystem({"endpoint_url": "http://127.0.0.1:9", "region": "us-east-1"})
    last_read, oldest = "1000", "2000"
    start = json.dumps({"n": 5, "shards": {"shardId-000000000000": last_read}}, separators=(",", ":"))
    arrival = datetime(2026, 11, 23, tzinfo=UTC)
    with Stubber(system.client) as stub:
        stub.add_client_error(
            "get_shard_iterator",
            service_error_code="ResourceNotFoundException",
            service_message="Unable to find record with provided SequenceNumber",
        )
        stub.add_response("get_shard_iterator", {"ShardIterator": "it-1"})
        stub.add_response(
            "get_records",
            {
                "Records": [
                    {
                        "SequenceNumber": oldest,
                        "PartitionKey": "k",
                        "Data": b"v",
                        "ApproximateArrivalTimestamp": arrival,
                    }
                ],
                "NextShardIterator": "it-2",
                "MillisBehindLatest": 0,
            },
        )
        stub.add_response(
            "describe_stream_summary",
            {
                "StreamDescriptionSummary": {
                    "StreamName": "s",
                    "StreamARN": "arn:aws:kinesis:us-east-1:000000000000:stream/s",
                    "StreamStatus": "ACTIVE",
                    "RetentionPeriodHours": 24,
                    "StreamCreationTimestamp": arrival,
                    "EnhancedMonitoring": [],
                    "OpenShardCount": 1,
                }
            },
        )
        stub.add_response(
            "list_shards",
            {
                "Shards": [
                    {
                        "ShardId": "shardId-000000000000",
                        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"},
                        "SequenceNumberRange": {"StartingSequenceNumber": "1"},
                    }
                ]
            },
        )
        with pytest.raises(StreamError) as error:
            system.read("s", 0, start, Bounded(start, 10))
    message = str(error.value)
    assert "shardId-000000000000" in message and f"after sequence number {last_read}" in message
    assert f"up to sequence number {oldest}" in message and "24 h" in message and "on_trimmed: skip" in message


def test_a_stream_deleted_and_created_again_is_named_as_such_not_read_on_or_called_trimmed(
    kinesis: KinesisSystem,
) -> None:
    """kinesis-mock gives a stream made again at once (within the second) the old one's shard ids and numbers its
    records as it numbered the old one's: the slots' old sequence numbers then name new records, and a read from them
    would skip the new records below them without a word. Made again later, the old numbers are unknown to it and
    it answers as for trimmed records. Either way the stream's creation time, kept in each slot position, names it."""
    from pipelines.errors import InputRewoundError

    stream = _stream(kinesis, 2)
    positions = {p: m.earliest for p, m in kinesis.describe(stream).partitions.items()}
    born = {decode_slot(p).created for p in positions.values()}
    assert len(born) == 1 and None not in born, positions
    kinesis.produce(stream, _keyed(0, 30))
    assert len(_round(kinesis, stream, positions, 100)) == 30
    old = dict(positions)

    kinesis.delete(stream)
    kinesis.create(stream, 2)
    kinesis.produce(stream, _keyed(0, 40))
    recreated = (
        r"Kinesis stream 's\d+' was deleted and created again under its name \(the job read the stream created at"
    )
    with pytest.raises(InputRewoundError, match=recreated):
        kinesis.advance(stream, old, dict.fromkeys(old, 100), {})
    with pytest.raises(InputRewoundError, match=recreated):
        kinesis.relayout(stream, old, 3)
    with pytest.raises(InputRewoundError, match=recreated):
        kinesis.reached(stream, 0, old[0], kinesis.end_positions(stream)[0])
    # A read in a process that holds no iterator of the old stream (one that does reads on with it: kinesis-mock
    # serves an old iterator from the new stream; the driver's plan of each batch is what is checked first).
    from pipelines.systems.kinesis import reader

    reader._ITERATORS.clear()
    for slot, position in old.items():
        with pytest.raises(InputRewoundError, match=recreated):
            kinesis.read(stream, slot, position, Bounded(position, 100))
    # A job started on the new stream reads it whole.
    fresh = {p: m.earliest for p, m in kinesis.describe(stream).partitions.items()}
    assert len(_round(kinesis, stream, fresh, 10)) == 20
    # Made again within the second, the old slots' sequence numbers are the new records' own (the checks above may
    # have met either case): slots at sequence numbers the stream holds, but read from an older stream of the name.
    rest = 0
    for slot, position in fresh.items():
        held = decode_slot(position)
        assert any(state.isdigit() for state in held.shards.values()), position
        assert held.created is not None
        older = SlotPosition(held.shards, held.n, held.created - 1000).encode()
        with pytest.raises(InputRewoundError, match=recreated):
            kinesis.read(stream, slot, older, Bounded(older, 100))
        rest += kinesis.read(stream, slot, position, Bounded(position, 100)).records.num_rows
    assert rest == 20, "the new stream's slots read on"


def test_a_sequence_number_kinesis_says_is_from_another_stream_is_not_called_trimmed() -> None:
    """Kinesis answers GetShardIterator with a sequence number of a deleted stream of the name so (the Stubber
    answers in its words): the stream was made again, not trimmed, and ``on_trimmed: skip`` must not read on."""
    from pipelines.errors import InputRewoundError

    system = KinesisSystem({"endpoint_url": "http://127.0.0.1:9", "region": "us-east-1", "on_trimmed": "skip"})
    start = json.dumps({"n": 5, "shards": {"shardId-000000000000": "1000"}}, separators=(",", ":"))
    with Stubber(system.client) as stub:
        stub.add_client_error(
            "get_shard_iterator",
            service_error_code="InvalidArgumentException",
            service_message="StartingSequenceNumber 1000 used in GetShardIterator on shard shardId-000000000000 in "
            "stream s under account 123456789012 is invalid because it did not come from this stream.",
        )
        with pytest.raises(InputRewoundError, match=r"Kinesis stream 's' was deleted and created again .*did not"):
            system.read("s", 0, start, Bounded(start, 10))


def test_the_emulator_listens_on_loopback_only() -> None:
    """kinesis-mock hard-codes 0.0.0.0; bind-host.js must turn every listener into a loopback one."""
    import psutil

    emulator = KinesisEmulator()
    emulator.start()
    try:
        assert emulator.process is not None
        procs = [psutil.Process(emulator.process.pid), *psutil.Process(emulator.process.pid).children(recursive=True)]
        listening = {
            (c.laddr.ip, c.laddr.port)
            for p in procs
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        }
        assert listening, "the emulator listens"
        assert {ip for ip, _ in listening} <= {"127.0.0.1", "::1"}, listening
    finally:
        emulator.stop()


def test_a_read_waits_out_an_endpoint_that_stops_answering_then_gives_up_after_read_timeout_s() -> None:
    """A batch's read in flight when the endpoint freezes (SIGSTOP: connections hang) must not fail the job."""
    import os
    import signal
    import threading
    import time

    emulator = KinesisEmulator()  # its own: this test freezes it
    url = emulator.start()
    quick = {"endpoint_url": url, "region": "us-east-1", "get_records_per_second": 100.0}
    quick |= {"connect_timeout_s": 1.0, "request_timeout_s": 1.0, "max_attempts": 1, "backoff_cap_s": 0.5}
    patient = KinesisSystem(quick | {"read_timeout_s": 60.0})
    impatient = KinesisSystem(quick | {"read_timeout_s": 1.5})
    try:
        assert emulator.process is not None
        stream = _stream(patient, 1)
        patient.produce(stream, _keyed(0, 20))
        start = patient.describe(stream).partitions[0].earliest
        end = patient.advance(stream, {0: start}, {0: 20}, {})[0]
        got: dict[str, Any] = {}
        os.killpg(emulator.process.pid, signal.SIGSTOP)
        try:
            reader = threading.Thread(target=lambda: got.update(result=patient.read(stream, 0, start, end)))
            reader.start()
            t0 = time.monotonic()
            with pytest.raises(StreamError, match=r"cannot reach Kinesis .*a read waited 1\.5s for it"):
                impatient.read(stream, 0, start, end)
            assert 1.5 <= time.monotonic() - t0 < 15
            time.sleep(3.0)
        finally:
            os.killpg(emulator.process.pid, signal.SIGCONT)
        reader.join(timeout=60)
        assert not reader.is_alive()
        assert [int(v) for v in got["result"].records.column("value").to_pylist()] == list(range(20))
        assert got["result"].stats["outage_s"] >= 3.0, "the read says it was held up, so its task reports an outage"
    finally:
        patient.close()
        impatient.close()
        emulator.stop()


def test_credentials_and_region_come_from_an_airflow_connection_in_uri_form(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines.systems.kinesis.client import session

    monkeypatch.setenv("AIRFLOW_CONN_KINESIS_TEST", "aws://AKIDEXAMPLE:wJalr%2FXUtn@/?region_name=us-east-1")
    system = KinesisSystem({"endpoint_url": endpoint, "aws_conn_id": "kinesis_test"})
    credentials = session(system.settings).get_credentials()
    assert (credentials.access_key, credentials.secret_key) == ("AKIDEXAMPLE", "wJalr/XUtn")
    assert system.client.meta.region_name == "us-east-1"
    stream = _stream(system, 1)  # the emulator accepts any credentials: the client works with these
    assert system.describe(stream).partition_count == 1


def test_the_emulator_refuses_a_port_another_server_holds_instead_of_taking_its_answer_for_its_own() -> None:
    """It is ready when its port answers: with the port already served, the other server's answer passed for
    kinesis-mock's, the endpoint was printed and every request then went to that other server."""
    import socket

    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        emulator = KinesisEmulator(port)
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is not free"):
            emulator.start()
        assert emulator.process is None, "nothing was started"


def test_kpl_aggregates_are_read_as_their_user_records_each_once_in_key_order_across_a_split(
    kinesis: KinesisSystem,
) -> None:
    stream = _stream(kinesis, 2)
    positions = {p: m.earliest for p, m in kinesis.describe(stream).partitions.items()}
    produced, read = _split_while_reading(
        kinesis,
        stream,
        positions,
        "shardId-000000000000",
        40,
        per_slot=12,
        over=AGGREGATE - 1,
        kpl=True,
    )
    read += _drain(kinesis, stream, positions, per_slot=500)
    _check_once_and_in_key_order(read, produced)
    assert all(key == f"key-{int(value) % 11}".encode() for _, _, key, value in read), "each under its own key"
    subs = [offset for _, offset, _, _ in read if offset.count(":") == 2]
    assert len(subs) == produced - produced // 4, "every aggregated record under its aggregate's sub-sequence"
    # What the data-quality checks expect in the sink: the same user records, under the same positions.
    listed = kinesis.records_read(stream, {}, positions)
    assert sorted(p for _, p in listed) == sorted(offset for _, offset, _, _ in read)


def test_a_record_that_only_looks_aggregated_reaches_the_job_whole(kinesis: KinesisSystem) -> None:
    stream = _stream(kinesis, 1)
    forged = b"\xf3\x89\x9a\xc2" + b"\x0a\x01k" + bytes(16)  # the magic, a message, a digest that does not match
    kinesis.produce(stream, [(b"k", forged, None), (b"k", b"plain", None)])
    positions = {p: m.earliest for p, m in kinesis.describe(stream).partitions.items()}
    rows = _round(kinesis, stream, positions, per_slot=10)
    assert [(key, value) for _, _, key, value in rows] == [(b"k", forged), (b"k", b"plain")]
    assert all(offset.count(":") == 1 for _, offset, _, _ in rows)


def test_a_start_at_a_time_reads_only_what_arrived_after_it_in_the_children_of_an_earlier_split_too(
    kinesis: KinesisSystem,
) -> None:
    stream = _stream(kinesis, 2)
    kinesis.produce(stream, _keyed(0, 40))  # before the time, in the parents
    kinesis.split_shard(stream, "shardId-000000000000")
    kinesis.produce(stream, _keyed(40, 40))  # before the time, partly in the children
    time.sleep(0.05)
    mark = int(time.time() * 1000)
    time.sleep(0.05)
    positions = kinesis.positions_at(stream, mark)
    assert {decode_slot(p).since for p in positions.values()} == {mark}
    kinesis.produce(stream, _keyed(80, 60))  # after it: the closed parent has none of these
    read = _drain(kinesis, stream, positions, per_slot=25)
    values = [int(v) for _, _, _, v in read]
    assert sorted(values) == list(range(80, 140)), "each record that arrived after the time once, none before"
    for key in {k for _, _, k, _ in read}:
        mine = [int(v) for _, _, k, v in read if k == key]
        assert mine == sorted(mine), f"key {key!r} out of order"
    assert any(offset.startswith("shardId-000000000003:") for _, offset, _, _ in read), "a child was taken over"
    assert all(decode_slot(p).since == mark for p in positions.values()), "the start time stays with the slots"
    # What the data-quality checks expect: the same records, none from before the time.
    assert sorted(p for _, p in kinesis.records_read(stream, {}, positions)) == sorted(o for _, o, _, _ in read)
    # A time this host has reached but the endpoint's clock may not have: nothing to read yet, not an error.
    ahead = kinesis.positions_at(stream, int(time.time() * 1000) + 60_000)
    assert _round(kinesis, stream, dict(ahead), per_slot=10) == []


def test_update_shard_count_up_then_down_while_reading_then_one_slot_per_shard_reads_every_record_once(
    kinesis: KinesisSystem,
) -> None:
    """UpdateShardCount (the console's and the CLI's "scale" of a stream): many splits at once, then merges."""
    stream = _stream(kinesis, 2)
    positions = {p: m.earliest for p, m in kinesis.describe(stream).partitions.items()}
    produced, read = 0, []
    for step in range(8):
        kinesis.produce(stream, _keyed(produced, 40))
        produced += 40
        if step in (1, 4):
            target = 4 if step == 1 else 3
            kinesis.client.update_shard_count(StreamName=stream, TargetShardCount=target, ScalingType="UNIFORM_SCALING")
            for _ in range(100):  # UPDATING while the shards change
                summary = kinesis.client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
                if summary["StreamStatus"] == "ACTIVE":
                    break
                time.sleep(0.1)
        read += _round(kinesis, stream, positions, per_slot=25)
    read += _drain(kinesis, stream, positions, per_slot=100)
    _check_once_and_in_key_order(read, produced)
    listed = kinesis.client.list_shards(StreamName=stream)["Shards"]
    assert len(listed) > 4 and any(s.get("AdjacentParentShardId") for s in listed), "splits, then a merge"
    count = kinesis.describe(stream).partition_count
    assert count == 3
    switched = kinesis.relayout(stream, positions, count)  # the repartition watch's 1:1 model
    kinesis.produce(stream, _keyed(produced, 60))
    produced += 60
    read += _drain(kinesis, stream, switched, per_slot=40)
    _check_once_and_in_key_order(read, produced)
