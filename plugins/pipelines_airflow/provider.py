"""What Airflow learns about this distribution without importing it: its provider info.

``elastic-pipelines-airflow`` is an Airflow *provider*: its
``apache_airflow_provider`` entry point (``plugins/pyproject.toml``) names
:func:`get_provider_info`, which Airflow's providers manager calls on every
host where the distribution is installed. From it Airflow lists the provider
(``airflow providers list``), offers the ``pipelines`` connection type in its
connection form with the fields below (read from here, so the form needs no
import of the hook), and knows the hook, the scaling operators and the
trigger the triggerer will import.

The UI page (a FastAPI app, a menu entry, the refusal-note listener) is an
Airflow *plugin*, registered through the ``airflow.plugins`` entry point
alone. It is not listed under ``plugins`` here as well: Airflow registers a
provider's plugins too when ``[core] lazy_discover_providers`` is off, and a
plugin registered twice is refused the second time with an import error.
"""

from __future__ import annotations

from typing import Any

PACKAGE = "elastic-pipelines-airflow"
INTEGRATION = "Elastic pipelines"
CONN_TYPE = "pipelines"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE,
        "name": INTEGRATION,
        "description": (
            "Elastic stream processing on Spark, operated by Airflow: the ``pipelines`` connection (where a "
            "deployment's home is), the scaling path's tasks with deferrable waits, and the Elastic pipelines page."
        ),
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["pipelines_airflow.hooks"]}],
        "operators": [{"integration-name": INTEGRATION, "python-modules": ["pipelines_airflow.scaling"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["pipelines_airflow.triggers"]}],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "pipelines_airflow.hooks.PipelinesHook",
                "hook-name": INTEGRATION,
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                    "relabeling": {},
                    "placeholders": {},
                },
                "conn-fields": {
                    "home": {
                        "label": "Home",
                        "description": (
                            "Where the deployment's state lives: a directory every host mounts at the same path, "
                            "or object storage (s3://bucket/prefix). Empty: the PIPELINES_HOME of each host."
                        ),
                        "schema": {"type": ["string", "null"]},
                    }
                },
            }
        ],
        "hook-class-names": ["pipelines_airflow.hooks.PipelinesHook"],  # what Airflow before 2.2 read
    }
