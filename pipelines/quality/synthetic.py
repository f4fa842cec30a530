"""A synthetic sink with correct lineage, made with numpy: for tests of the checks and the benchmark."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipelines.core.hashing import key_buckets
from pipelines.quality.checks import INPUT_ORDER, expected_records


def synthetic_window(
    rows: int, *, partitions: int = 4, factor: int = 4, keys: int = 1000, batch: int = 10_000, seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(expected records, sink rows, dead letters) of a clean run at one factor (model version 1)."""
    rng = np.random.default_rng(seed)
    key_id = rng.integers(0, keys, rows)
    names = np.array([f"key-{k}".encode() for k in range(keys)], dtype=object)
    partition = (key_id % partitions).astype("int32")
    offset = pd.Series(partition).groupby(partition).cumcount().to_numpy()
    bucket_of_key = np.array(key_buckets(list(names), [0] * keys, factor), dtype="int32")
    bucket = bucket_of_key[key_id]
    if factor == 1:
        task = np.char.add("Partition ", partition.astype(str))
        key_bucket = pd.Series([None] * rows, dtype="Int32")
    else:
        task = np.char.add(np.char.add(np.char.add("Partition ", partition.astype(str)), "-"), bucket.astype(str))
        task = np.char.add(task, f"-{factor}")
        key_bucket = pd.Series(bucket, dtype="Int32")
    batch_id = np.arange(rows) // batch
    frame = pd.DataFrame(
        {
            "virtual_task": task.astype(object),
            "model_version": np.ones(rows, dtype="int64"),
            "key_bucket": key_bucket,
            "stream": "events",
            "partition": partition,
            "offset": offset.astype(str).astype(object),
            INPUT_ORDER: offset.astype("int64"),
            "key": names[key_id],
            "batch_id": batch_id,
        }
    )
    frame["task_seq"] = frame.groupby(["batch_id", "virtual_task"]).cumcount().astype("int64")
    frame["event_key"] = pd.Series(names[key_id]).str.decode("utf-8")
    frame["seq"] = pd.Series(key_id).groupby(key_id).cumcount().astype("int64")
    counts = np.bincount(partition, minlength=partitions)
    expected = expected_records(("events", p, (str(o) for o in range(int(n)))) for p, n in enumerate(counts))
    dead = frame.iloc[0:0][["virtual_task", "model_version", "key_bucket", "stream", "partition", "offset", "key"]]
    dead = dead.assign(batch_id=pd.Series(dtype="int64"), task_seq=pd.Series(dtype="int64"), error=pd.Series(dtype=str))
    return expected, frame, dead
