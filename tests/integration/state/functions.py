"""Process functions that misuse their state, for the dead-letter tests (``test_stateful_job``)."""

from __future__ import annotations

from typing import Any

from pipelines.jobs.process import Record, TaskContext, per_record


@per_record
def too_big(record: Record, ctx: TaskContext) -> dict[str, Any]:
    ctx.state.put(record.key, {"events": 1, "note": "x" * 200})  # the test's state allows 100 bytes
    return {}


@per_record
def unknown_state(record: Record, ctx: TaskContext) -> dict[str, Any]:
    ctx.state["nope"].get(record.key)
    return {}


@per_record
def wrong_type(record: Record, ctx: TaskContext) -> dict[str, Any]:
    ctx.state.put(record.key, {"events": "three"})
    return {}


@per_record
def another_tasks_key(record: Record, ctx: TaskContext) -> dict[str, Any]:
    ctx.state.get(b"a key no record of this task has")
    return {}


def totals_in_bulk(records: Any, ctx: TaskContext) -> Any:
    """The example fold in the Arrow form: one bulk read of the batch's keys, a fold per key, one bulk write."""
    import json

    import pyarrow as pa

    keys = records.column("key").to_pylist()
    seen = {k: r for k, r in zip(keys, ctx.state.read(keys).to_pylist(), strict=True)}
    out = []
    for key, stream, partition, offset, value in zip(
        keys, *(records.column(c).to_pylist() for c in ("stream", "partition", "offset", "value")), strict=True
    ):
        event = json.loads(value)
        row = seen[key] if seen[key]["_exists"] else {"events": 0, "amount": 0}
        row = {"events": row["events"] + 1, "amount": row["amount"] + event["amount"], "last_seq": event["seq"]}
        seen[key] = {**row, "_exists": True}
        out.append(
            {
                "stream": stream,
                "partition": partition,
                "offset": offset,
                "customer": event["key"],
                "seq": event["seq"],
                **row,
            }
        )
    written = {k: {c: v for c, v in r.items() if c != "_exists"} for k, r in seen.items() if r["_exists"]}
    ctx.state.write(list(written), list(written.values()))
    return pa.Table.from_pylist(out)
