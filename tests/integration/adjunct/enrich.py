"""A process function that enriches demo events through two stores (the end-to-end job test names it)."""

from __future__ import annotations

import json
from typing import Any

from pipelines.jobs.process import Record, TaskContext, per_record


@per_record
def process(record: Record, ctx: TaskContext) -> dict[str, Any]:
    doc = json.loads(record.value)
    owned = ctx.stores["owned"].get(record.key or b"")  # partitioned: this task's key bucket
    everything = ctx.stores["everything"].get(record.key or b"")  # broadcast: the whole dataset
    if owned != everything:
        raise ValueError(f"partitioned store served {owned!r}, broadcast store {everything!r}")
    return {
        "event_key": doc["key"],
        "seq": int(doc["seq"]),
        "payload": doc.get("payload"),
        "enriched": None if owned is None else owned.decode(),
    }
