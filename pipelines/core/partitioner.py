"""Kafka's default partitioner, so the embedded log places keys exactly as Kafka would.

Java's ``Utils.murmur2`` (seed 0x9747b28c) and ``toPositive(h) % n``; the same
as librdkafka's ``murmur2_random`` for non-null keys. Keeping this identical to
Kafka matters twice: a stream moved between Kafka and the embedded log keeps
its key placement, and partition expansion from N to kN moves a key from p only
to partitions p' with ``p' mod N == p`` (the SEP-5 property the fixed-task-num
grouper relies on).
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 as a signed 32-bit int, bit for bit."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    full = length - length % 4
    for i in range(0, full, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length % 4
    if extra >= 3:
        h ^= data[full + 2] << 16
    if extra >= 2:
        h ^= data[full + 1] << 8
    if extra >= 1:
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
