"""The processing step's Python side, outside Spark: rows in input order, dead letters in place, lineage kept."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from pipelines.jobs.output_schema import parse_output_schema
from pipelines.jobs.process import Record, TaskContext, per_record
from pipelines.runtime import schemas
from pipelines.runtime.processing import make_processor

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


def reversed_arrow(table: pa.Table, ctx: TaskContext) -> pa.Table:
    """An Arrow-form function that answers in reverse order; the step puts rows back in input order."""
    rows = [
        {"stream": s, "partition": p, "offset": o, "k": "a", "n": int(o)}
        for s, p, o in zip(
            table["stream"].to_pylist(), table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True
        )
    ]
    return pa.Table.from_pylist(rows[::-1])


def run(process: str, values: list[bytes]) -> dict[str, list[Any]]:
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
            "timestamp": [None] * n,
            "headers": [None] * n,
            "marker": [None] * n,
        },
        schema=schemas.arrow(schemas.SOURCE),
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
