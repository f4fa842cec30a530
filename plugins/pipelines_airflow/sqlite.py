"""Connect arguments for an Airflow on SQLite (``scripts/airflow.sh``, the end-to-end tests).

SQLite has one writer at a time; Python's driver makes another wait 5 s, then fails with "database is locked".
On a loaded two-core machine the scheduler's transactions outlast that, and the API server answered a DAG's
unpause with 500 "Database error". A minute's wait queues the writer instead. Airflow reads these through
``[database] sql_alchemy_connect_args`` (and ``..._async`` for the API server's async engine).
"""

from __future__ import annotations

BUSY_TIMEOUT_S = 60.0

CONNECT_ARGS: dict[str, object] = {"timeout": BUSY_TIMEOUT_S}
CONNECT_ARGS_ASYNC: dict[str, object] = {"timeout": BUSY_TIMEOUT_S}
