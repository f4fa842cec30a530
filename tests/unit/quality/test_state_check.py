"""The state check on pandas frames: each key's row agrees with its records in the input, or it names the key."""

from __future__ import annotations

import pandas as pd
import pytest

from pipelines.quality.state_check import FLAG_STATE, applied_records, state_flags

pytestmark = pytest.mark.unit


def records(rows: list[tuple[str, int, int]]) -> pd.DataFrame:
    """(key, partition, offset) records of stream ``events``, in input order per partition."""
    frame = pd.DataFrame(
        {
            "stream": "events",
            "partition": [p for _, p, _ in rows],
            "offset": [str(o) for _, _, o in rows],
            "key": [k.encode() for k, _, _ in rows],
        }
    )
    frame["input_order"] = frame["offset"].astype(int)
    return frame


def row(key: str, n: int, first: tuple[int, int], last: tuple[int, int]) -> dict[str, object]:
    return {
        "key": key.encode(),
        "_records": n,
        "_first_stream": "events",
        "_first_partition": first[0],
        "_first_offset": str(first[1]),
        "_last_stream": "events",
        "_last_partition": last[0],
        "_last_offset": str(last[1]),
    }


INPUT = records([("a", 0, 0), ("b", 0, 1), ("a", 0, 2), ("a", 0, 3), ("b", 1, 0)])


def test_rows_that_count_and_name_their_records_pass() -> None:
    state = pd.DataFrame([row("a", 3, (0, 0), (0, 3)), row("b", 2, (0, 1), (1, 0))])
    frame, verdict = state_flags("totals", INPUT, state)
    assert verdict.ok and verdict.keys == 2 and frame[FLAG_STATE].all(), verdict.summary()


@pytest.mark.parametrize(
    ("state_rows", "says"),
    [
        (
            [row("a", 4, (0, 0), (0, 3)), row("b", 2, (0, 1), (1, 0))],
            "key a: 3 records applied in the input, the state counts 4",
        ),
        (
            [row("a", 3, (0, 0), (0, 2)), row("b", 2, (0, 1), (1, 0))],
            "key a: the state's last record is events/0@2, the input's is events/0@3",
        ),
        ([row("b", 2, (0, 1), (1, 0))], "key a: 3 records applied in the input, no state row"),
        (
            [row("a", 3, (0, 0), (0, 3)), row("b", 2, (0, 1), (1, 0)), row("z", 1, (0, 9), (0, 9))],
            "key z: a state row counting 1 records, none applied in the input",
        ),
    ],
)
def test_a_row_that_disagrees_is_named_with_why(state_rows: list[dict[str, object]], says: str) -> None:
    _, verdict = state_flags("totals", INPUT, pd.DataFrame(state_rows))
    assert not verdict.ok and verdict.wrong == 1
    assert verdict.examples == [says], verdict.examples
    assert verdict.samples[0]["key"] == says.split(":")[0].removeprefix("key ")


def test_dead_letters_do_not_count_and_a_key_in_two_partitions_ends_in_either() -> None:
    dead = pd.DataFrame({"stream": ["events"], "partition": [0], "offset": ["3"]})
    applied = applied_records(INPUT, dead)
    state = pd.DataFrame([row("a", 2, (0, 0), (0, 2)), row("b", 2, (0, 1), (0, 1))])
    _, verdict = state_flags("totals", applied, state)
    assert verdict.ok, verdict.summary()  # b ended in partition 0: the last of its records there


def test_with_a_ttl_an_expired_key_is_not_judged_and_a_renewed_row_counts_from_its_first() -> None:
    state = pd.DataFrame([row("a", 2, (0, 2), (0, 3))])  # a's row began again at offset 2; b expired
    _, verdict = state_flags("totals", INPUT, state, ttl=True)
    assert verdict.ok and verdict.absent == 1, verdict.summary()
    wrong = pd.DataFrame([row("a", 3, (0, 2), (0, 3))])
    _, verdict = state_flags("totals", INPUT, wrong, ttl=True)
    assert verdict.examples == ["key a: 2 records since its row began, the state counts 3"]


def test_an_input_retention_trimmed_judges_only_the_last() -> None:
    state = pd.DataFrame([row("a", 9, (0, 0), (0, 3)), row("b", 9, (0, 1), (1, 0))])
    _, verdict = state_flags("totals", INPUT, state, counted=False)
    assert verdict.ok and "counts not judged" in verdict.summary()
