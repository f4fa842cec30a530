"""Upkeep of the embedded log's streams: daily, retention (files older than the stream's own retention, set with
`pipelines stream alter NAME --retention 3d|forever`, else than `older_than`, 7 days by default), then compaction
of the small files that remain.

Each stream is trimmed as `pipelines stream trim NAME --older-than AGE` does it: whole files from the front of
each partition, never a partition's last file, and never a record that a job of the home, or an adjunct store
the stream feeds, has not read yet (a stream that feeds a bootstrapped store is kept whole). Records a job has
not read are never taken here: that is the operator's explicit `pipelines stream trim --lose-unread`. Then, with
`compact` on, it is compacted as `pipelines stream compact NAME` does it: runs of small files merged into one,
offsets and order kept. The task log shows per partition what went, what held the rest, and the files before
and after. Paused when it first appears, unlike the other scheduled DAGs (`scripts/airflow.sh` registers those
unpaused): deleting data starts when the operator unpauses it.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import CronTriggerTimetable, Param, get_current_context, task
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.platform_dag import platform_dag
from pipelines_airflow.run_conf import check_conf

from pipelines.core.durations import DURATION_PATTERN, parse_duration
from pipelines.core.segments import COMPACT_SPAN_MS, COMPACT_TARGET_BYTES, retention_cutoff, retention_text
from pipelines.core.ssp import validate_name
from pipelines.errors import ConfigError


@platform_dag(
    "stream_maintenance",
    "retention",
    "compaction",
    description="Retention and compaction of the embedded log's streams (paused at creation: it deletes data)",
    doc_md=__doc__,
    schedule=CronTriggerTimetable("30 3 * * *", timezone="UTC"),
    is_paused_upon_creation=True,  # deleting data is the operator's choice, whatever the deployment's default
    params={
        "older_than": Param(
            "7d",
            type="string",
            pattern=DURATION_PATTERN,
            description="delete files whose every record is older than this (30m, 12h, 7d; Kafka's "
            "log.retention.hours), in each stream without a retention of its own ('stream alter --retention')",
        ),
        "compact": Param(True, type="boolean", description="after the trim, merge each stream's small files"),
        "streams": Param(
            [],
            type="array",
            items={"type": "string"},
            description="the embedded log's streams to trim; empty: every stream of the home",
        ),
    },
)
def stream_maintenance() -> None:
    @task
    def streams() -> list[str]:
        from pipelines.systems.deltalog import DeltaLog

        check_conf()  # a misspelt "strems" trimmed every stream
        params = get_current_context()["params"]
        parse_duration(params["older_than"], "older_than")  # a bad age fails here, before any stream is touched
        named = [validate_name("stream", name) for name in params["streams"]]
        existing = DeltaLog(PipelinesHook().home().streams).list_streams()
        missing = sorted(set(named) - set(existing))
        if missing:  # refused before any stream is trimmed, not by its mapped task after the others were
            raise ConfigError(
                f"no stream {', '.join(missing)} in the home; its streams: {', '.join(existing) or 'none'}"
            )
        return named or existing

    @task(map_index_template="{{ stream_name }}")
    def maintain(stream: str) -> dict[str, Any]:
        from pipelines.core.start import time_of_ms
        from pipelines.operations.retention import kept_from, trim_stream
        from pipelines.systems.deltalog import DeltaLog

        context = get_current_context()
        context["stream_name"] = stream  # type: ignore[typeddict-unknown-key]  # names the mapped task in the UI
        home = PipelinesHook().home()
        age = parse_duration(context["params"]["older_than"], "older_than")
        log = DeltaLog(home.streams)
        try:
            own = log.retention(stream)  # the stream's own (stream alter --retention) wins, as a topic's retention.ms
            before_ms = retention_cutoff(int(time.time() * 1000), own, age.total_seconds())
            summary: dict[str, Any] = {"stream": stream, "retention": retention_text(own), "records": 0, "files": 0}
            if before_ms is None:
                print(f"{stream}: retention forever (its own): nothing deleted")
            else:
                done, readers = trim_stream(home, stream, before_ms)
                print(
                    f"{stream}: {done.records} records in {done.files} files older than {time_of_ms(before_ms)} "
                    f"deleted (retention: {params_or_own(own, context['params']['older_than'])})"
                )
                for p in done.partitions:
                    print(
                        f"  partition {p.partition}: earliest {p.earliest_before} -> {p.earliest}, kept from: "
                        f"{kept_from(done, readers, p.partition)}"
                    )
                summary.update(records=done.records, files=done.files)
            if context["params"]["compact"]:
                merged = log.compact(stream, COMPACT_TARGET_BYTES, COMPACT_SPAN_MS)
                print(f"{stream}: merged {sum(r.files for r in merged.runs)} files into {len(merged.runs)}")
                for n in sorted(merged.files_before):
                    print(f"  partition {n}: {merged.files_before[n]} files -> {merged.files_after[n]}")
                summary["files_after"] = sum(merged.files_after.values())
        finally:
            log.close()
        return summary

    maintain.expand(stream=streams())


def params_or_own(own: int | None, older_than: str) -> str:
    """Which retention a run applied to a stream, for its log."""
    return f"the DAG's older_than {older_than}" if own is None else f"the stream's own {retention_text(own)}"


stream_maintenance()
