"""KPL-aggregated Kinesis records: one Kinesis record that carries many user records, taken apart as KCL does.

The Kinesis Producer Library (and awslabs' aggregation libraries) packs user
records into one Kinesis record: the magic ``F3 89 9A C2``, a protobuf
``AggregatedRecord`` (a table of partition keys, one of explicit hash keys,
and the records, each naming its keys by index), and the MD5 of that message.
KCL hands its consumers the user records, each with its own partition key and
a sub-sequence number under the Kinesis record's sequence number; a job that
saw the aggregate as one record would bucket every user record by the first
one's key and hand its process one protobuf blob.

What is not a well-formed aggregate (no magic, a digest that does not match,
a message that does not parse, an index past its table) is one plain record,
as KCL treats it: its bytes reach the job whole and nothing is dropped. Unlike
KCL, user records whose hash key lies outside the shard's range (a producer's
stale shard map after a split) are kept, not dropped: see
docs/systems/kinesis.md, "KPL-aggregated records". Pure: no boto3.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

MAGIC = b"\xf3\x89\x9a\xc2"
DIGEST_SIZE = 16  # MD5


class UserRecord(NamedTuple):
    """One user record of an aggregate; ``explicit_hash_key`` is None when the producer gave none."""

    partition_key: str
    data: bytes
    explicit_hash_key: str | None = None


class _Malformed(Exception):
    """The message is not an ``AggregatedRecord``: the caller keeps the Kinesis record whole."""


def is_aggregated(data: bytes) -> bool:
    """Cheap pre-check on the read path: only records that begin with the magic are parsed."""
    return len(data) > len(MAGIC) + DIGEST_SIZE and data[: len(MAGIC)] == MAGIC


def deaggregate(data: bytes) -> list[UserRecord] | None:
    """The user records of a KPL aggregate, in the order the producer added them; None: a plain record.

    An aggregate of no records is an aggregate too (an empty list): it carries nothing for the job.
    """
    if not is_aggregated(data):
        return None
    body, digest = data[len(MAGIC) : -DIGEST_SIZE], data[-DIGEST_SIZE:]
    if hashlib.md5(body, usedforsecurity=False).digest() != digest:
        return None
    try:
        return _parse(body)
    except _Malformed:
        return None


def _parse(body: bytes) -> list[UserRecord]:
    partition_keys: list[str] = []
    hash_keys: list[str] = []
    raw: list[tuple[int, int | None, bytes]] = []
    for number, value in _fields(body):
        if number == 1:
            partition_keys.append(_text(value))
        elif number == 2:
            hash_keys.append(_text(value))
        elif number == 3:
            raw.append(_record(_bytes(value)))
    records = []
    for pk_index, ehk_index, data in raw:
        if pk_index >= len(partition_keys) or (ehk_index is not None and ehk_index >= len(hash_keys)):
            raise _Malformed("a key index past its table")
        records.append(UserRecord(partition_keys[pk_index], data, None if ehk_index is None else hash_keys[ehk_index]))
    return records


def _record(body: bytes) -> tuple[int, int | None, bytes]:
    """``Record``: partition_key_index (1, required), explicit_hash_key_index (2), data (3, required), tags (4)."""
    pk_index: int | None = None
    ehk_index: int | None = None
    data: bytes | None = None
    for number, value in _fields(body):
        if number == 1:
            pk_index = _int(value)
        elif number == 2:
            ehk_index = _int(value)
        elif number == 3:
            data = _bytes(value)
    if pk_index is None or data is None:
        raise _Malformed("a record without its required fields")
    return pk_index, ehk_index, data


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """Protobuf wire format: (field number, varint or length-delimited bytes); fixed-width fields are skipped."""
    fields: list[tuple[int, int | bytes]] = []
    i, end = 0, len(buf)
    while i < end:
        tag, i = _varint(buf, i)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise _Malformed("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
            fields.append((number, value))
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > end:
                raise _Malformed("a field longer than its message")
            fields.append((number, buf[i : i + size]))
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
            if i > end:
                raise _Malformed("a fixed-width field cut short")
        else:  # groups (3, 4) are not in this message; 6 and 7 do not exist
            raise _Malformed(f"wire type {wire}")
    return fields


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise _Malformed("a varint cut short or longer than 64 bits")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _int(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise _Malformed("an index that is not a varint")
    return value


def _bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise _Malformed("bytes that are a varint")
    return value


def _text(value: int | bytes) -> str:
    try:
        return _bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed("a key that is not UTF-8") from None
