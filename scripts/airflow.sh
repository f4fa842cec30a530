#!/usr/bin/env bash
# A local Airflow for this repository's DAGs and plugin (SQLite, LocalExecutor, loopback only):
# `airflow standalone` with AIRFLOW_HOME=./.airflow and the jobs' state in $PIPELINES_HOME (default ./.pipelines-home).
# The UI is http://127.0.0.1:8080; the admin password is printed at start and kept in ./.airflow.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export AIRFLOW_HOME="${AIRFLOW_HOME:-$PWD/.airflow}"
export PIPELINES_HOME="${PIPELINES_HOME:-$PWD/.pipelines-home}"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$PWD/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"   # 2 cores: keep tasks few
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:8080/execution/"
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}"
export SPARK_LOCAL_IP=127.0.0.1
export PATH="$PWD/.venv/bin:$PATH"
exec airflow standalone
