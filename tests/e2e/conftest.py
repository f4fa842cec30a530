"""End-to-end tests: a real Airflow (api-server, scheduler, dag-processor) and a real browser.

Importing this file points Airflow at a throwaway home (``AIRFLOW_HOME``,
SQLite database, ``dags/`` and ``plugins/`` of this repository, LocalExecutor,
everything on 127.0.0.1) and ``PIPELINES_HOME`` at a temporary folder, before
anything in the pytest process imports ``airflow``. Nothing is started or
migrated until a test asks for ``airflow_db`` or ``running_airflow``.
"""

from __future__ import annotations

from tests.e2e.airflow_fixtures import (  # noqa: F401  (fixtures)
    AirflowClient,
    airflow_db,
    configure_airflow_environment,
    running_airflow,
)
from tests.e2e.browser import browser  # noqa: F401  (fixture)

AIRFLOW_ENV = configure_airflow_environment()
