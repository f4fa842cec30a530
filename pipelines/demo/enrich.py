"""Enrichment with a simulated remote call: the workload elasticity exists for.

Each record costs ``latency_ms`` of waiting (a lookup service, a model), which
no amount of CPU makes faster: only more tasks in parallel do. One output row
per input record. A value that is not a JSON object with ``key`` and ``seq``
raises, so it lands in the dead-letter table.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pipelines.jobs.process import Record, TaskContext, per_record


@per_record
def process(record: Record, ctx: TaskContext) -> dict[str, Any]:
    latency = float(ctx.options.get("latency_ms", 0)) / 1000.0
    doc = json.loads(record.value)
    if not isinstance(doc, dict) or "seq" not in doc or "key" not in doc:
        raise ValueError(f"value is not a demo event (needs 'key' and 'seq'): {record.value[:80]!r}")
    if latency:
        time.sleep(latency)
    row = {
        "event_key": doc["key"],
        "seq": int(doc["seq"]),
        "payload": doc.get("payload"),
        "enriched": f"{doc['key']}#{int(doc['seq'])}",
    }
    customers = ctx.stores.get(CUSTOMERS)
    if customers is not None:  # the demo's job looks its customers up in an adjunct store fed by a change stream
        name = customers.get(record.key)
        row["customer"] = None if name is None else name.decode()
    return row


CUSTOMERS = "customers"
