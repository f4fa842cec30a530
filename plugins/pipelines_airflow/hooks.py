"""Where a deployment's state lives, as Airflow sees it."""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

from pipelines.storage.home import Home, resolve_home


class PipelinesHook(BaseHook):
    """Resolves the pipelines home: the connection's ``home`` extra, else ``PIPELINES_HOME``, else the default.

    A connection lets one Airflow drive several deployments (one connection
    each) and keeps the path out of DAG code; a single deployment needs only
    the environment variable its workers already share with the drivers.

    The connection type and its form (one field, ``home``) are declared in the
    provider info (``pipelines_airflow.provider``). Airflow's form stores the
    field in the extra as ``home``; the older ``extra__pipelines__home`` and
    the connection's host are read too.
    """

    conn_name_attr = "pipelines_conn_id"
    default_conn_name = "pipelines_default"
    conn_type = "pipelines"
    hook_name = "Elastic pipelines"

    def __init__(self, pipelines_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipelines_conn_id = pipelines_conn_id

    def get_conn(self) -> Home:
        return self.home()

    def home(self) -> Home:
        try:
            conn = self.get_connection(self.pipelines_conn_id)
        except Exception:  # no such connection (AirflowNotFoundException): the environment decides
            return resolve_home()
        extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else json.loads(conn.extra or "{}")
        return resolve_home(extra.get("home") or extra.get(f"extra__{self.conn_type}__home") or conn.host or None)
