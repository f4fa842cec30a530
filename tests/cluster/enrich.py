"""The multi-host job's process function: demo events enriched through a broadcast adjunct store, and counted per key
in keyed state."""

from __future__ import annotations

import json
import time
from typing import Any

from pipelines.jobs.process import Record, TaskContext, per_record


@per_record
def process(record: Record, ctx: TaskContext) -> dict[str, Any]:
    time.sleep(float(ctx.options.get("latency_ms", 0)) / 1000.0)  # the demo's remote call: tasks of 0.1 s or more
    doc = json.loads(record.value)
    found = ctx.stores["customers"].get(record.key or b"")  # served on the executor's host, from the home
    seen = ctx.state.get(record.key) or {"events": 0}  # the key's state, cached on the executor's host
    ctx.state.put(record.key, {"events": seen["events"] + 1, "last_seq": int(doc["seq"])})
    return {
        "event_key": doc["key"],
        "seq": int(doc["seq"]),
        "payload": doc.get("payload"),
        "enriched": None if found is None else found.decode(),
        "events": seen["events"] + 1,
    }
