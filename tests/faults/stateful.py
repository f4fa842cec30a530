"""The fault matrix's job function: the demo's enrichment, plus a fold kept as keyed state per key.

Every point of the matrix runs this stateful job, so each crash is also judged on the state: each key's events,
amounts and last seq must be the fold of its records in the stream, exactly once.
"""

from __future__ import annotations

import json
from typing import Any

from pipelines.demo import enrich
from pipelines.jobs.process import Record, TaskContext, per_record

STATE = {"name": "totals", "value_schema": "events BIGINT, amount BIGINT, last_seq BIGINT"}
OUTPUT = ", events BIGINT, amount BIGINT, last_seq BIGINT"


@per_record
def process(record: Record, ctx: TaskContext) -> dict[str, Any]:
    row = enrich.process(record, ctx)
    event = json.loads(record.value)
    seen = ctx.state.get(record.key) or {"events": 0, "amount": 0}
    total = {"events": seen["events"] + 1, "amount": seen["amount"] + int(event["amount"]), "last_seq": event["seq"]}
    ctx.state.put(record.key, total)
    return {**row, **total}
