"""Where a state's tables live in the home and the columns they hold.

Two Delta tables per state, siblings under ``<home>/state/<job>/<state>/``:

* ``current``: one row per key, the fold of every change up to one segment (written by compaction, which says
  the segment in each commit's ``pipelines.state.segment``); what a Spark user reads.
* ``changes``: append-only, one commit per micro-batch that changed the state (a *segment*), partitioned by the
  key bucket and factor of the virtual task that wrote the rows, so a task reads only its own keys' share.

Rows carry the key itself (binary), its murmur3 hash, the value columns and the bookkeeping of
``pipelines.core.state``.
"""

from __future__ import annotations

import re

import pyarrow as pa

from pipelines.core import state as rules
from pipelines.core.ssp import validate_name
from pipelines.storage.home import Home
from pipelines.storage.location import Location

CHANGES_PARTITIONS = ("factor", "key_bucket")
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_ARROW = {
    "bigint": pa.int64(),
    "int": pa.int32(),
    "smallint": pa.int16(),
    "tinyint": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}
TIME = pa.timestamp("us", tz="UTC")


def state_dir(home: Home, job: str, state: str) -> Location:
    return home.root / "state" / validate_name("job", job) / validate_name("state", state)


def current_path(home: Home, job: str, state: str) -> Location:
    return state_dir(home, job, state) / "current"


def changes_path(home: Home, job: str, state: str) -> Location:
    return state_dir(home, job, state) / "changes"


def arrow_type(simple: str) -> pa.DataType:
    """Spark's simple type name as the Arrow type Spark reads and writes for it."""
    found = _DECIMAL.match(simple)
    if found is not None:
        return pa.decimal128(int(found.group(1)), int(found.group(2)))
    return _ARROW[simple]


def value_fields(spec: rules.StateSpec) -> list[pa.Field]:
    return [pa.field(c.name, arrow_type(c.type), nullable=True) for c in spec.columns]


BOOKKEEPING_FIELDS = [
    pa.field(rules.RECORDS, pa.int64()),
    pa.field(rules.FIRST[0], pa.string()),
    pa.field(rules.FIRST[1], pa.int32()),
    pa.field(rules.FIRST[2], pa.string()),
    pa.field(rules.LAST[0], pa.string()),
    pa.field(rules.LAST[1], pa.int32()),
    pa.field(rules.LAST[2], pa.string()),
    pa.field(rules.UPDATED_AT, TIME),
    pa.field(rules.HAS_VALUE, pa.bool_()),
    pa.field(rules.SEGMENT, pa.int64()),
]
KEY_FIELDS = [pa.field(rules.KEY, pa.binary()), pa.field(rules.KEY_HASH, pa.int64())]


def current_schema(spec: rules.StateSpec) -> pa.Schema:
    """One row per key: the key, its hash, the value columns, then the bookkeeping."""
    return pa.schema([*KEY_FIELDS, *value_fields(spec), *BOOKKEEPING_FIELDS])


def changes_schema(spec: rules.StateSpec) -> pa.Schema:
    """A change row: a key's whole row after a batch, and which batch and virtual task wrote it."""
    return pa.schema(
        [
            *current_schema(spec),
            pa.field("model_version", pa.int64()),
            pa.field("batch_id", pa.int64()),
            pa.field("factor", pa.int32()),
            pa.field("key_bucket", pa.int32()),
        ]
    )


def row_names(spec: rules.StateSpec) -> list[str]:
    """The columns of a row as tasks and caches hold it (``current_schema``'s names)."""
    return list(current_schema(spec).names)
