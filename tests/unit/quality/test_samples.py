"""A failed check keeps its first offenders as fields (key, stream, partition, offset): what the UI lists."""

from __future__ import annotations

import json

from pipelines.quality.checks import EXAMPLES, annotate
from pipelines.quality.synthetic import synthetic_window

FACTOR = 4


def test_lost_and_duplicated_records_are_sampled_by_key_and_offset_at_most_five() -> None:
    expected, rows, dead = synthetic_window(300, partitions=2, factor=FACTOR, keys=20, batch=50, seed=3)
    dropped = rows.iloc[[5, 9, 40, 41, 77, 120, 200]]  # 7 lost records: more than the sample keeps
    kept = rows.drop(index=dropped.index)
    twice = kept.iloc[[12]]
    sink = kept._append(twice, ignore_index=True)  # one record delivered twice
    verdict = annotate(expected, sink, dead, lambda v: FACTOR).verdict()

    assert verdict.lost == 7 and verdict.duplicates == 1
    lost = verdict.samples["lost"]
    assert len(lost) == EXAMPLES == 5
    dropped_at = {("events", int(p), str(o)) for p, o in zip(dropped["partition"], dropped["offset"], strict=True)}
    assert {(s["stream"], s["partition"], s["offset"]) for s in lost} <= dropped_at
    (dup,) = verdict.samples["duplicated"]
    assert dup == {
        "key": twice["key"].iloc[0].decode(),
        "stream": "events",
        "partition": int(twice["partition"].iloc[0]),
        "offset": str(twice["offset"].iloc[0]),
    }
    json.dumps(verdict.samples)  # recorded as JSON in dq_results.sample
    # the text examples and the fields name the same offenders
    assert [f"{s['stream']}/{s['partition']}@{s['offset']}" for s in lost] == verdict.examples["lost"]


def test_a_clean_window_has_no_sample() -> None:
    expected, rows, dead = synthetic_window(100, partitions=2, factor=FACTOR, keys=10, batch=50, seed=1)
    verdict = annotate(expected, rows, dead, lambda v: FACTOR).verdict()
    assert verdict.ok and verdict.samples == {}
