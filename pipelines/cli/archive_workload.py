"""The representative driver the class-data archive is made from (``runtime.jvm_archive.build`` runs it):
``python -m pipelines.cli.archive_workload PACKAGE_ROOT`` in a scratch folder.

A small job on the embedded log, run available-now, then Spark SQL and a Delta read: the classes a driver loads
for its first query, which the archive then holds.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(root: str) -> None:
    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job
    from pipelines.runtime.driver import run_job
    from pipelines.runtime.session import build_session
    from pipelines.storage.home import Home
    from pipelines.systems.deltalog import DeltaLog

    home = Home(Path.cwd() / "home")  # the build's scratch folder, removed after
    log = DeltaLog(home.streams)
    log.create("events", 2)
    log.produce("events", [(f"k{i % 7}".encode(), b'{"key": "k", "seq": 0}', None) for i in range(40)])
    base = JobConfig.load(Path(root) / "include" / "jobs" / "enrichment.yaml").to_dict()
    base.update(
        name="archive",
        inputs=[{"system": "deltalog", "stream": "events"}],
        elasticity_factor=2,
        process_options={"latency_ms": 0},
        sink={"table": "archive_out"},
        dead_letter={"table": "archive_dead"},
        batch={"max_records": 20, "trigger_interval": "0 seconds"},
    )
    base.pop("stores", None)
    create_job(home, JobConfig.from_dict(base))
    spark = build_session("local[2]", "pipelines-class-archive")
    run_job(spark, home, "archive", available_now=True, progress=lambda m: None)
    spark.sql("SELECT 1").collect()
    spark.read.format("delta").load(str(home.sinks / "archive_out")).count()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
