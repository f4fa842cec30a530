"""KPL-aggregated records taken apart (``pipelines.systems.kinesis.aggregation``), against awslabs' aggregator.

The aggregates here are made by ``aws_kinesis_agg`` (awslabs' Python
implementation of the KPL's format), not by a twin of the decoder, so a
misread field shows up as a mismatch rather than agreeing with itself.
"""

from __future__ import annotations

import hashlib

import pytest
from aws_kinesis_agg.aggregator import RecordAggregator  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st

from pipelines.systems.kinesis.aggregation import DIGEST_SIZE, MAGIC, UserRecord, deaggregate, is_aggregated
from pipelines.systems.kinesis.positions import RecordPosition, decode_record, position_key, unread_in_shard

keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
hash_keys = st.none() | st.integers(min_value=0, max_value=2**128 - 1).map(str)
users = st.lists(st.tuples(keys, st.binary(max_size=64), hash_keys), min_size=1, max_size=30)


def aggregate(records: list[tuple[str, bytes, str | None]]) -> bytes:
    agg = RecordAggregator()
    for key, data, ehk in records:
        assert agg.add_user_record(key, data, explicit_hash_key=ehk) is None, "one aggregate holds them all"
    _pk, _ehk, blob = agg.clear_and_get().get_contents()
    return bytes(blob)


@given(users)
def test_every_user_record_comes_back_in_order_with_its_own_keys(records: list[tuple[str, bytes, str | None]]) -> None:
    assert deaggregate(aggregate(records)) == [UserRecord(k, d, h) for k, d, h in records]


@given(st.binary(max_size=200))
def test_bytes_without_the_magic_are_one_plain_record(data: bytes) -> None:
    if not data.startswith(MAGIC):
        assert not is_aggregated(data) and deaggregate(data) is None


def test_a_digest_that_does_not_match_leaves_the_record_whole() -> None:
    blob = aggregate([("k", b"v", None), ("j", b"w", None)])
    assert deaggregate(blob[:-1] + bytes([blob[-1] ^ 1])) is None
    assert deaggregate(blob[:-DIGEST_SIZE]) is None  # cut short
    assert deaggregate(MAGIC + bytes(DIGEST_SIZE)) is None  # no message at all


@pytest.mark.parametrize(
    "message",
    [
        b"\x0a\x05ab",  # a partition key longer than the message
        b"\x1a\x02\x08\x00",  # a record with no data (required)
        b"\x0a\x01k\x1a\x04\x08\x01\x1a\x00",  # partition key index 1 of a table of one
        b"\x0a\x01k\x1a\x06\x08\x00\x10\x00\x1a\x00",  # an explicit hash key index into an empty table
        b"\x0a\x02\xff\xfe\x1a\x04\x08\x00\x1a\x00",  # a key that is not UTF-8
        b"\x0b",  # wire type 3 (a group)
        b"\x08" + b"\xff" * 11,  # a varint of more than 64 bits
        b"\x00",  # field number 0
    ],
)
def test_a_digest_over_a_message_that_is_no_aggregate_leaves_the_record_whole(message: bytes) -> None:
    data = MAGIC + message + hashlib.md5(message).digest()
    assert is_aggregated(data) and deaggregate(data) is None


def test_an_aggregate_skips_tags_and_unknown_fields_and_may_hold_nothing() -> None:
    record = b"\x08\x00\x1a\x01v" + b"\x22\x03\x0a\x01t" + b"\x29" + bytes(8) + b"\x35" + bytes(4)  # tag, fixed64/32
    message = b"\x0a\x01k" + b"\x1a" + bytes([len(record)]) + record + b"\x78\x05"  # field 15, a varint
    assert deaggregate(MAGIC + message + hashlib.md5(message).digest()) == [UserRecord("k", b"v")]
    empty = b"\x0a\x01k"
    assert deaggregate(MAGIC + empty + hashlib.md5(empty).digest()) == []


@given(st.integers(0, 10**30).map(str), st.integers(0, 10**6), st.integers(0, 10**6))
def test_a_user_records_position_sorts_under_its_aggregate_and_is_read_with_it(seq: str, a: int, b: int) -> None:
    shard = "shardId-000000000003"
    first, second = RecordPosition(shard, seq, min(a, b)), RecordPosition(shard, seq, max(a, b))
    for p in (first, second):
        assert decode_record(p.encode()) == p
    assert position_key(first.encode()) <= position_key(second.encode())
    assert position_key(RecordPosition(shard, seq).encode()) < position_key(first.encode())
    later = RecordPosition(shard, str(int(seq) + 1), 0)
    assert position_key(second.encode()) < position_key(later.encode())
    assert not unread_in_shard(first.sequence, seq) and unread_in_shard(later.sequence, seq)
