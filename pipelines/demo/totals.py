"""Per customer: how many events it sent, their total amount and the last ``seq`` seen; a fold kept as keyed state.

The state follows its key through every rescale, expansion and restart, and is applied exactly once with the sink
rows of the same batch (docs/design.md, "Keyed state"). ``latency_ms`` simulates a slow call per record.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pipelines.demo.enrich import CUSTOMERS
from pipelines.jobs.process import Record, TaskContext, per_record


@per_record
def totals(record: Record, ctx: TaskContext) -> dict[str, Any]:
    event = json.loads(record.value)
    if latency := float(ctx.options.get("latency_ms", 0)):
        time.sleep(latency / 1000.0)
    seen = ctx.state.get(record.key) or {"events": 0, "amount": 0}
    total = {"events": seen["events"] + 1, "amount": seen["amount"] + int(event["amount"]), "last_seq": event["seq"]}
    ctx.state.put(record.key, total)
    return {"customer": event["key"], "seq": event["seq"], **total}


@per_record
def totals_with_names(record: Record, ctx: TaskContext) -> dict[str, Any]:
    """The demo's job: ``totals``, and each customer's current name from the adjunct store fed by its changes."""
    row: dict[str, Any] = totals(record, ctx)
    names = ctx.stores.get(CUSTOMERS)
    if names is not None:
        name = names.get(record.key)
        row["name"] = None if name is None else name.decode()
    return row
