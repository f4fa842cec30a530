"""Rebuild the data-quality report: validate every job's whole run, publish Data Docs, hourly or after a rescale.

Runs when a scaling step has recorded its event (the `pipelines_scaling_events` Asset that `elastic_rescale` and
`repartition_watch` update at their end) and every hour. Not on the activation of a new model, as it did: that
started a whole-run validation (a task process and Great Expectations, on a 2-core machine) in the very second the
job's driver switched models (`benchmarks/bench_airflow_switch.py` found it in half the Airflow switches). Results
go to the `dq_results` table; the Data Docs site is `<home>/quality/docs/index.html`.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import task
from pipelines_airflow.assets import QUALITY, SCALING_EVENTS
from pipelines_airflow.hooks import PipelinesHook
from pipelines_airflow.platform_dag import hourly_and_on, platform_dag
from pipelines_airflow.run_conf import check_conf
from pipelines_airflow.scaling import dag_run, docs_in_ui

from pipelines.control import ControlPlane
from pipelines.errors import PipelinesError


@platform_dag(
    "quality_report",
    "quality",
    description="Validates every job's whole run and state, publishes the Data Docs: hourly, after each scaling step",
    doc_md=__doc__,
    schedule=hourly_and_on(SCALING_EVENTS),
)
def quality_report() -> None:
    @task(outlets=[QUALITY])
    def validate_all_jobs() -> dict[str, Any]:
        from pipelines.operations.scaling.readings import default_sequence
        from pipelines.quality.report import run_quality

        check_conf()
        home = PipelinesHook().home()
        produced_by = dag_run()  # recorded with every verdict: the UI links each one to this run
        verdicts: dict[str, Any] = {}
        docs = None
        for job in ControlPlane(home).job_models.jobs():
            try:
                report = run_quality(home, job, sequence=default_sequence(home, job), dag_run=produced_by)
            except PipelinesError as e:  # e.g. a job that never ran: nothing to validate yet
                print(f"{job}: not validated: {e}")
                verdicts[job] = f"skipped: {e}"
                continue
            print(report.summary())
            verdicts[job] = "pass" if report.success else "fail"
            docs = str(report.docs_index)
        if docs is not None:  # the page's address in this Airflow's UI, else the report's path
            docs = docs_in_ui() or docs
            print(f"Data Docs: {docs}")
        failed = [job for job, verdict in verdicts.items() if verdict == "fail"]
        if failed:
            raise PipelinesError(f"data-quality checks FAILED for {', '.join(failed)}; Data Docs: {docs}")
        return {"verdicts": verdicts, "docs": docs}

    validate_all_jobs()


quality_report()
