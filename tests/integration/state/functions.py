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
