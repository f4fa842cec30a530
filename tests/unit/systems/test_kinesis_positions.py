"""Kinesis position formats and their order: pure, no boto3 (``pipelines.systems.kinesis.positions``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.shards import SHARD_END, TRIM_HORIZON
from pipelines.errors import StreamError
from pipelines.systems.kinesis.positions import (
    RecordPosition,
    SlotPosition,
    TimeTarget,
    decode,
    decode_slot,
    iterator_at,
    position_key,
    state_key,
    unread_in_shard,
)

sequences = st.integers(min_value=0, max_value=10**56 - 1).map(str)
shards = st.integers(min_value=0, max_value=10**6).map(lambda n: f"shardId-{n:012d}")
states = st.one_of(st.just(TRIM_HORIZON), st.just(SHARD_END), sequences)


@given(st.dictionaries(shards, states, max_size=5), st.integers(min_value=0, max_value=10**9))
def test_a_slot_position_is_restored_exactly(slot: dict[str, str], n: int) -> None:
    text = SlotPosition(slot, n).encode()
    again = decode_slot(text)
    assert again.encode() == text and dict(again.shards) == slot and again.n == n


@given(st.dictionaries(shards, states, max_size=3), st.integers(min_value=0, max_value=10**9), st.integers(0, 2**45))
def test_a_slot_position_keeps_the_creation_time_of_its_stream(slot: dict[str, str], n: int, created: int) -> None:
    text = SlotPosition(slot, n, created).encode()
    again = decode_slot(text)
    assert again.encode() == text and again.created == created and dict(again.shards) == slot
    assert position_key(text) == position_key(SlotPosition(slot, n).encode()), "progress alone orders a slot"


def test_a_checkpoint_written_before_the_creation_time_was_kept_still_reads() -> None:
    old = '{"n":3,"shards":{"shardId-000000000000":"TRIM_HORIZON"}}'
    assert decode_slot(old).created is None and decode_slot(old).encode() == old


@given(st.dictionaries(shards, states, max_size=3), st.integers(0, 10**9), st.integers(0, 2**45), st.integers(0, 2**45))
def test_a_slot_started_at_a_time_keeps_it(slot: dict[str, str], n: int, created: int, since: int) -> None:
    text = SlotPosition(slot, n, created, since).encode()
    assert decode_slot(text) == SlotPosition(slot, n, created, since) and decode_slot(text).encode() == text
    assert position_key(text) == position_key(SlotPosition(slot, n).encode()), "progress alone orders a slot"


def test_a_shard_not_yet_read_starts_at_the_slots_time_and_a_read_one_after_its_last_record() -> None:
    assert iterator_at(TRIM_HORIZON, None) == {"ShardIteratorType": "TRIM_HORIZON"}
    at = iterator_at(TRIM_HORIZON, 1_795_957_544_266)
    assert at["ShardIteratorType"] == "AT_TIMESTAMP" and at["Timestamp"].timestamp() == 1_795_957_544.266
    after = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": "49"}
    assert iterator_at("49", 1_795_957_544_266) == after and iterator_at("49", None) == after


@given(sequences, sequences)
def test_sequence_numbers_compare_as_integers_never_as_text(a: str, b: str) -> None:
    ka = position_key(RecordPosition("shardId-000000000001", a).encode())
    kb = position_key(RecordPosition("shardId-000000000001", b).encode())
    assert (ka < kb) == (int(a) < int(b))
    assert state_key(TRIM_HORIZON) < state_key(a) < state_key(SHARD_END)


def test_text_order_would_be_wrong_and_ours_is_not() -> None:
    short, long = "9" * 55, "1" + "0" * 55  # long > short as numbers, < as text
    assert long < short
    assert position_key(f"shardId-000000000000:{short}") < position_key(f"shardId-000000000000:{long}")


@given(sequences, states)
def test_a_record_is_unread_exactly_when_its_shard_state_is_before_it(sequence: str, state: str) -> None:
    expected = state == TRIM_HORIZON or (state != SHARD_END and int(state) < int(sequence))
    assert unread_in_shard(sequence, state) == expected


def test_children_order_after_parents_and_slot_positions_order_by_progress() -> None:
    parent = position_key("shardId-000000000000:900")
    child = position_key("shardId-000000000002:100")
    assert parent < child
    assert position_key(SlotPosition({}, 3).encode()) < position_key(SlotPosition({}, 4).encode())
    assert isinstance(decode(TimeTarget(5).encode()), TimeTarget)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "12",
        "shard-1:12",
        "shardId-000000000001:1x",
        '{"n":-1,"shards":{}}',
        "{",
        '{"created":null,"n":1,"shards":{}}',
        '{"created":"1","n":1,"shards":{}}',
        '{"n":1,"shards":{},"since":-5}',
        '{"n":1,"shards":{},"since":true}',
        '{"n":1,"shards":{},"until":5}',
        "shardId-000000000001:12:",
        "shardId-000000000001:12:x",
        "shardId-000000000001:12:1:2",
        "shardId-000000000001:12\n",
    ],
)
def test_anything_else_is_refused_with_the_reason(bad: str) -> None:
    with pytest.raises(StreamError, match=r"(?i)kinesis"):
        position_key(bad)
