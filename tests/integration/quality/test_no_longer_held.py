"""Sink rows of records retention removed after they were read: counted apart, per partition, never a fault."""

from __future__ import annotations

import pandas as pd

from pipelines.quality.checks import with_input_order
from pipelines.quality.verify import _no_longer_held
from pipelines.systems.deltalog import position_key


def _rows(offsets: dict[int, list[int]]) -> pd.DataFrame:
    frame = pd.DataFrame(
        [("events", p, str(o)) for p, os_ in offsets.items() for o in os_], columns=["stream", "partition", "offset"]
    )
    return with_input_order(frame, lambda s: position_key)


def test_rows_before_a_partitions_earliest_are_counted_per_partition_and_a_clean_input_has_none() -> None:
    rows = _rows({0: list(range(0, 12)), 1: list(range(0, 5)), 2: [7, 8, 9, 10]})
    order = {"events": position_key}
    # offsets compare as numbers, not text ("10" > "9"): partition 0 lost 0..9, partition 2 lost 7..9
    earliest = {("events", 0): "10", ("events", 1): "0", ("events", 2): "10"}
    assert _no_longer_held(rows, earliest, order) == {"events/0": 10, "events/2": 3}
    assert _no_longer_held(rows, {k: "0" for k in earliest}, order) == {}
    assert _no_longer_held(rows.iloc[0:0], earliest, order) == {}
    assert _no_longer_held(rows, {("events", 2): "9"}, order) == {"events/2": 2}, "a partition not named is skipped"
