"""Parse a job's ``output_schema`` (Spark DDL of flat columns) without a JVM.

Spark's own DDL parser needs a running SparkContext, but the schema is needed
where none runs (``job create``, executors, the sink's commit), so the common
flat subset is parsed here and anything else is refused with a clear error.
"""

from __future__ import annotations

import re

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipelines.errors import ConfigError

_TYPES: dict[str, DataType] = {
    "STRING": StringType(),
    "BIGINT": LongType(),
    "LONG": LongType(),
    "INT": IntegerType(),
    "INTEGER": IntegerType(),
    "SMALLINT": ShortType(),
    "TINYINT": ByteType(),
    "DOUBLE": DoubleType(),
    "FLOAT": FloatType(),
    "BOOLEAN": BooleanType(),
    "BINARY": BinaryType(),
    "TIMESTAMP": TimestampType(),
    "DATE": DateType(),
}
_COLUMN = re.compile(r"^`?(?P<name>[A-Za-z_][A-Za-z0-9_]*)`?\s+(?P<type>[A-Za-z]+(\(\s*\d+\s*,\s*\d+\s*\))?)$")


def parse_output_schema(ddl: str) -> StructType:
    fields = []
    for part in (p.strip() for p in ddl.split(",") if p.strip()) if "(" not in ddl else _split(ddl):
        m = _COLUMN.match(part)
        if not m:
            raise ConfigError(f"output_schema column {part!r} is not 'name TYPE'")
        name, dtype = m["name"], m["type"].upper().replace(" ", "")
        if dtype.startswith("DECIMAL("):
            precision, scale = (int(x) for x in dtype[8:-1].split(","))
            fields.append(StructField(name, DecimalType(precision, scale), True))
        elif dtype in _TYPES:
            fields.append(StructField(name, _TYPES[dtype], True))
        else:
            raise ConfigError(
                f"output_schema column {name!r} has type {dtype}; use one of {', '.join(_TYPES)}, DECIMAL(p,s)"
            )
    if not fields:
        raise ConfigError("output_schema has no columns")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ConfigError(f"output_schema lists a column twice: {names}")
    return StructType(fields)


def _split(ddl: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in ddl:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts
