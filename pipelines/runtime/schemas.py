"""Column layouts between the source, the reading, processing and the sink.

Spark checks a data source's Arrow batches against its schema exactly, so each
layout is defined once, as a Spark ``StructType`` built in Python (no JVM is
needed, so executors and the driver-side source/sink runners can build it
too), and its Arrow form is derived from it. Offsets are the input systems'
record positions, opaque strings each system orders itself (``position_key``).

The source hands Spark one ``TASKS`` row per virtual task (its ``TaskRange``,
``runtime.reading``); the sink's writer reads that task's records as
``RECORDS`` batches and processes them in the same Python worker.

Every virtual task's records end with one *marker* row (``marker`` set, the
rest null) that carries the end offsets it read up to and its counters; it
passes through processing and tells the sink which checkpoints to write, even
for a task whose buckets had no record in the batch.
"""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

DATA, DEAD, MARKER = "data", "dead", "marker"


def _fields(*spec: tuple[str, DataType]) -> list[StructField]:
    return [StructField(name, dtype, True) for name, dtype in spec]


LINEAGE = _fields(
    ("virtual_task", StringType()),
    ("model_version", LongType()),
    ("key_bucket", IntegerType()),
    ("stream", StringType()),
    ("partition", IntegerType()),
    ("offset", StringType()),
    ("key", BinaryType()),
)
TASKS = StructType(_fields(("virtual_task", StringType()), ("model_version", LongType()), ("task", BinaryType())))
RECORDS = StructType(
    [
        *LINEAGE,
        *_fields(("value", BinaryType()), ("timestamp", TimestampType()), ("headers", StringType())),
        *_fields(("marker", StringType())),
    ]
)
PROCESSED_LINEAGE = [*LINEAGE, *_fields(("batch_id", LongType()), ("task_seq", LongType()))]
ROW_KIND = _fields(
    ("_kind", StringType()), ("_error", StringType()), ("_value", BinaryType()), ("_marker", StringType())
)
DEAD_LETTER = StructType([*PROCESSED_LINEAGE, *_fields(("value", BinaryType()), ("error", StringType()))])


def processed_schema(output: StructType) -> StructType:
    """The processing step's output: lineage, the user's columns, then the row kind."""
    return StructType([*PROCESSED_LINEAGE, *_checked(output), *ROW_KIND])


def sink_schema(output: StructType) -> StructType:
    """What lands in the sink table: lineage then the user's columns."""
    return StructType([*PROCESSED_LINEAGE, *_checked(output)])


def _checked(output: StructType) -> list[StructField]:
    reserved = {f.name.lower() for f in [*PROCESSED_LINEAGE, *ROW_KIND]}
    clash = sorted(f.name for f in output.fields if f.name.lower() in reserved)
    if clash:
        from pipelines.errors import ConfigError

        raise ConfigError(f"output_schema may not reuse the lineage column names {clash}; rename them")
    return list(output.fields)


def arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for a struct (timestamps in UTC)."""
    return to_arrow_schema(schema, timezone="UTC")


def to_json(schema: StructType) -> str:
    return schema.json()


def from_json(text: str) -> StructType:
    return StructType.fromJson(json.loads(text))
