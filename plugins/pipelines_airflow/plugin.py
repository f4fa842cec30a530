"""The ``elastic_pipelines`` Airflow plugin: the "Elastic pipelines" page in the Airflow UI.

Registered through the distribution's ``airflow.plugins`` entry point
(``plugins/pyproject.toml``), so every Airflow host that has
``elastic-pipelines-airflow`` installed finds it, with no plugins folder.

* ``fastapi_apps``: the page's FastAPI app (``pipelines_airflow.app``), mounted by the
  api-server under ``/elastic-pipelines`` (HTML at ``/elastic-pipelines/``, JSON at
  ``/elastic-pipelines/api/jobs``). Every route requires a logged-in Airflow user with
  DAG read access (``requires_access_dag("GET")`` from Airflow's own API security). The same app
  serves the home's Data Docs (``/elastic-pipelines/docs/``) and the rescale form, whose trigger also
  needs the permission to trigger ``elastic_rescale``.
* ``external_views``: a "Elastic pipelines" entry in the UI's Browse menu that shows the
  page inside Airflow (at ``/plugin/elastic-pipelines``); the iframe is same-origin, so
  the UI's ``_token`` cookie authenticates it (``pipelines_airflow.app`` says what its sandbox allows).
* ``listeners``: ``pipelines_airflow.notes``, which writes a refused ``elastic_rescale`` run's reason into
  the run's note (called by the scheduler when the run fails).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from pipelines_airflow import notes
from pipelines_airflow.app import URL_PREFIX, app
from pipelines_airflow.page import TITLE


class ElasticPipelinesPlugin(AirflowPlugin):
    # Declared as AirflowPlugin declares them (plain attributes, not ClassVar), which mypy requires of an override.
    name = "elastic_pipelines"
    fastapi_apps: list[Any] = [{"app": app, "url_prefix": URL_PREFIX, "name": TITLE}]  # noqa: RUF012
    external_views: list[Any] = [  # noqa: RUF012
        {
            "name": TITLE,
            "href": URL_PREFIX.lstrip("/") + "/",  # relative to the UI's base URL, so it works under a root path
            "url_route": URL_PREFIX.lstrip("/"),
            "destination": "nav",
            "category": "browse",
        }
    ]
    listeners: list[ModuleType | object] = [notes]  # noqa: RUF012
