"""The metric names a writer (the sink's commit, the driver, the source) and a reader (the operator's view, the
autosizer, the demo) of the ``metrics`` table must agree on: defined once, here, below both."""

from __future__ import annotations

DURATION = "batch_duration_s"
"""Per batch (job-wide row): Spark's ``durationMs.triggerExecution`` in seconds, written by the job's driver."""
TIME_BEHIND = "input.millis_behind_latest"
"""Per task: the input system's own time behind the stream's tip (Kinesis), in milliseconds."""
LAG = "lag_records"
KEYS = "keys_in"
"""Per task and batch: the distinct keys among its records (the skew test's sample, ``pipelines.observe.skew``)."""
LIFECYCLE = frozenset({"query_started", "first_progress", "query_stopped", "heartbeat"})
TASK_COUNTS = ("records_in", "records_out", "records_fetched", "bytes_fetched", "dead_letters")
TASK_TIMES = ("read_s", "key_hash_s", "wait_s", "process_s")
OUTAGE_DOWN = "input_unavailable_s"  # the source, when an input stops answering (then every 30 s): down so far
OUTAGE_BACK = "input_recovered_s"  # the source, on the first answer after an outage: how long it lasted
