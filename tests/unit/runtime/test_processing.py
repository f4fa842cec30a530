"""The processing step's Python side, outside Spark: rows in input order, dead letters in place, lineage kept."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.jobs.output_schema import parse_output_schema
from pipelines.jobs.process import Record, TaskContext, per_record
from pipelines.runtime import schemas
from pipelines.runtime.processing import column_values, make_processor

OUTPUT = "k STRING, n BIGINT"
HERE = __name__


@per_record
def explode(record: Record, ctx: TaskContext) -> Any:
    """A record's value says what to emit: a number of rows, a bad row, or an error."""
    doc = json.loads(record.value)  # not JSON: raises, so the record is a dead letter
    if doc == "skip":
        return None
    if doc == "unfit":
        return {"k": "x", "n": "not a number"}  # does not fit BIGINT
    return [{"k": record.key.decode(), "n": doc * 10 + i} for i in range(doc)]


@per_record
def stamp(record: Record, ctx: TaskContext) -> dict[str, Any]:
    """What a per-record function sees of the record's time."""
    when = record.timestamp
    return {"k": None if when is None else when.isoformat(), "n": None if when is None else when.microsecond}


def reversed_arrow(table: pa.Table, ctx: TaskContext) -> pa.Table:
    """An Arrow-form function that answers in reverse order; the step puts rows back in input order."""
    rows = [
        {"stream": s, "partition": p, "offset": o, "k": "a", "n": int(o)}
        for s, p, o in zip(
            table["stream"].to_pylist(), table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True
        )
    ]
    return pa.Table.from_pylist(rows[::-1])


def run(process: str, values: list[bytes], stamps: list[int | None] | None = None) -> dict[str, list[Any]]:
    n = len(values)
    source = pa.RecordBatch.from_pydict(
        {
            "virtual_task": ["Partition 0"] * n,
            "model_version": [1] * n,
            "key_bucket": [-1] * n,
            "stream": ["s"] * n,
            "partition": [0] * n,
            "offset": [str(i) for i in range(n)],
            "key": [b"key"] * n,
            "value": values,
            "timestamp": stamps or [None] * n,
            "headers": [None] * n,
            "marker": [None] * n,
        },
        schema=schemas.arrow(schemas.RECORDS),
    )
    processor = make_processor("j", process, {}, schemas.to_json(parse_output_schema(OUTPUT)))
    out = pa.Table.from_batches(list(processor(iter([source.slice(0, 3), source.slice(3)]))))
    return out.select(["offset", "task_seq", "k", "n", "_kind", "_error", "_value"]).to_pydict()


def test_rows_dead_letters_and_unfit_rows_keep_input_order_with_one_task_sequence() -> None:
    got = run(f"{HERE}:explode", [b"2", b"{oops", b'"skip"', b"1", b'"unfit"', b"0", b"3"])
    assert got["offset"] == ["0", "0", "1", "3", "4", "6", "6", "6"]
    assert got["_kind"] == ["data", "data", "dead", "data", "dead", "data", "data", "data"]
    assert got["task_seq"] == list(range(8))
    assert got["n"] == [20, 21, None, 10, None, 30, 31, 32]
    assert got["k"][:2] == ["key", "key"] and got["k"][2] is None
    assert got["_error"][2].startswith("JSONDecodeError")
    assert got["_error"][4].startswith("output row does not match output_schema")
    assert got["_value"][2] == b"{oops" and got["_value"][4] == b'"unfit"'
    assert [e for k, e in zip(got["_kind"], got["_error"], strict=True) if k == "data"] == [None] * 6


def test_an_arrow_function_answering_out_of_order_is_put_back_in_input_order() -> None:
    got = run(f"{HERE}:reversed_arrow", [b"a", b"b", b"c", b"d", b"e"])
    assert got["offset"] == ["0", "1", "2", "3", "4"]
    assert got["n"] == [0, 1, 2, 3, 4]
    assert got["task_seq"] == [0, 1, 2, 3, 4]
    assert set(got["_kind"]) == {"data"}


def test_a_batch_of_only_dead_letters_keeps_every_record_with_its_error() -> None:
    got = run(f"{HERE}:explode", [b"{a", b'"unfit"', b"{c", b"{d"])
    assert got["offset"] == ["0", "1", "2", "3"]
    assert got["_kind"] == ["dead"] * 4
    assert got["_value"] == [b"{a", b'"unfit"', b"{c", b"{d"]
    assert got["k"] == [None] * 4 and got["n"] == [None] * 4


def test_a_per_record_function_sees_aware_utc_datetimes_and_nulls() -> None:
    got = run(f"{HERE}:stamp", [b"a", b"b", b"c"], [1_700_000_000_000_007, None, -1])
    assert got["k"] == ["2023-11-14T22:13:20.000007+00:00", None, "1969-12-31T23:59:59.999999+00:00"]
    assert got["n"] == [7, None, 999_999]


_MICROS = st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999)  # years 1 to 9999


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), _MICROS), max_size=40), tz=st.sampled_from([None, "UTC", "Etc/UTC", "+00:00"])
)
def test_column_values_equal_to_pylist(values: list[int | None], tz: str | None) -> None:
    """The fast timestamp path gives what pyarrow gives, value, zone object and nulls alike; other types are
    pyarrow's own path."""
    column = pa.array(values, pa.timestamp("us", tz=tz))
    fast, slow = column_values(column), column.to_pylist()
    assert fast == slow
    assert [v.tzinfo for v in fast if v is not None] == [v.tzinfo for v in slow if v is not None]
    chunked = pa.chunked_array([column, column])
    assert column_values(chunked) == chunked.to_pylist()


def test_column_values_keeps_pyarrow_for_other_zones_and_units() -> None:
    """A zone with daylight saving is not shifted by epoch arithmetic: pyarrow's conversion is kept."""
    summer = 1_719_835_200_000_000  # 2024-07-01 12:00 UTC, 08:00 in New York (EDT)
    zoned = pa.array([0, summer], pa.timestamp("us", tz="America/New_York"))
    assert column_values(zoned) == zoned.to_pylist()
    assert column_values(zoned)[1].hour == 8
    millis = pa.array([1, None], pa.timestamp("ms", tz="UTC"))
    assert column_values(millis) == millis.to_pylist()
