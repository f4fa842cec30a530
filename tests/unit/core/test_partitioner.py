from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.partitioner import kafka_partition, murmur2


@pytest.mark.parametrize(
    ("text", "expected"),
    [  # Kafka's UtilsTest.testMurmur2 vectors
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


@given(st.binary(min_size=1, max_size=40), st.integers(1, 64), st.integers(1, 8))
def test_expansion_moves_a_key_only_to_its_congruent_partitions(key: bytes, n: int, k: int) -> None:
    # SEP-5's premise: after N -> kN, partition p' of a key satisfies p' mod N == old p.
    assert kafka_partition(key, n * k) % n == kafka_partition(key, n)
