"""Spark's own floor for one micro-batch of a Python streaming pipeline: what no runtime of ours can go below.

``bench_runtime`` measures our fixed cost per micro-batch; this is the baseline
for that figure, in the same session and with the same shape: a Python
streaming source whose batch is 100 records in 2 input partitions (factor 1
of a 2-partition stream) straight into a Python Arrow stream writer (ours runs
the user's function inside its writer, with no step between), Spark's offset
and commit logs on local disk, the same trigger. Everything of
ours is left out: no log read, no processing function, no Delta write, no sink
commit, no control-plane rows. The difference between the two is the part of
the fixed cost we own.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

PARTITIONS = 2
SCHEMA = "partition INT, offset BIGINT, value BINARY"


class _Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        self.partition, self.start, self.end = partition, start, end


class FloorSource(DataSource):
    """``total`` records, ``per_batch`` of them per micro-batch, split evenly over 2 partitions."""

    @classmethod
    def name(cls) -> str:
        return "spark_floor"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> FloorReader:
        return FloorReader(int(self.options["total"]), int(self.options["per_batch"]))

    def streamWriter(self, schema: Any, overwrite: bool) -> FloorWriter:
        return FloorWriter()


class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Admission-controlled like ours (``ReadMaxRows``), so available-now runs one batch per ``per_batch``."""

    def __init__(self, total: int, per_batch: int) -> None:
        self.total, self.per_batch = total, per_batch

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        admit = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
        return {"offset": min(int(start["offset"]) + admit, self.total)}

    def reportLatestOffset(self) -> dict[str, int]:
        return {"offset": self.total}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Range]:
        first, last = int(start["offset"]), int(end["offset"])
        cuts = [first + (last - first) * i // PARTITIONS for i in range(PARTITIONS + 1)]
        return [_Range(p, cuts[p], cuts[p + 1]) for p in range(PARTITIONS)]

    def read(self, partition: _Range) -> Iterator[tuple[int, int, bytes]]:
        for offset in range(partition.start, partition.end):
            yield partition.partition, offset, b"{}"

    def commit(self, end: dict[str, int]) -> None:
        pass


class FloorWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:  # consumed, as a real writer would
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


def floor_batch_s(spark: Any, listener: Any, batches: int, per_batch: int) -> dict[str, float]:
    """Median of Spark's durations (s) over ``batches`` micro-batches of ``per_batch`` records, by part."""
    spark.dataSource.register(FloorSource)
    name = f"spark_floor_{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="spark-floor-") as checkpoints:
        query = (
            spark.readStream.format("spark_floor")
            .option("total", str(batches * per_batch))
            .option("per_batch", str(per_batch))
            .load()
            .writeStream.format("spark_floor")
            .queryName(name)
            .option("checkpointLocation", str(Path(checkpoints) / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = [b for b in listener.wait(name) if b.get("rows")]
    if not progress:
        raise SystemExit("spark floor: no progress reports")

    def median(key: str) -> float:
        return statistics.median(b.get(key, 0.0) for b in progress) / 1000.0

    return {
        "batch": median("triggerExecution"),
        "planning": median("latestOffset") + median("getBatch") + median("queryPlanning"),
        "offset_log": median("walCommit"),
        "spark_job": median("addBatch"),
        "commit_log": median("commitOffsets"),
        "batches": float(len(progress)),
    }
