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
SWITCH_PHASES = (
    "switch.started_ahead",  # 1: the new query was started behind a gate before the old one stopped (runtime.gate)
    "switch.carry_s",  # the old query's stop to the new model's checkpoints carried forward
    "switch.start_s",  # carried forward to the new query let go: its start() returned, or its gate opened
    "switch.first_trigger_s",  # start() to the trigger of its first batch with data (the query's own start-up)
    "switch.plan_s",  # that trigger's planning: the source's latestOffset, in Spark's source runner
    "switch.offset_log_s",  # that trigger's write of its offsets (Spark's offset log), before the batch runs
    "switch.first_batch_s",  # that whole first batch, its commit included (after the downtime's end)
    "switch.downtime_s",  # the old query's stop to the new one's first batch with data running
)
"""Per in-place switch (job-wide rows of the new model version, ``pipelines.runtime.switch_timeline``)."""
