"""Control-plane tables as Airflow Assets, so DAGs can react to their updates (a new model triggers the report)."""

from __future__ import annotations

from airflow.sdk import Asset

JOB_MODELS = Asset(name="pipelines_job_models", uri="pipelines://control/job_models", group="pipelines")
SCALING_EVENTS = Asset(name="pipelines_scaling_events", uri="pipelines://control/scaling_events", group="pipelines")
QUALITY = Asset(name="pipelines_dq_results", uri="pipelines://control/dq_results", group="pipelines")
