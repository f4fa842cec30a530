"""An Airflow on SQLite (``scripts/airflow.sh``, the end-to-end tests): connect arguments and the journal mode.

A writer waits a minute for SQLite's one lock instead of failing after 5 s, and the database runs in
write-ahead-log mode, where readers never hold the writer off; why both are needed is decision 0018
(docs/decisions/0018-airflow-on-sqlite-in-wal-mode.md). Airflow reads the arguments through
``[database] sql_alchemy_connect_args`` (and ``..._async``); ``use_wal`` switches a database once.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from pathlib import Path

BUSY_TIMEOUT_S = 60.0

CONNECT_ARGS: dict[str, object] = {"timeout": BUSY_TIMEOUT_S}
CONNECT_ARGS_ASYNC: dict[str, object] = {"timeout": BUSY_TIMEOUT_S}


def database_file(conn: str) -> Path | None:
    """The file of a ``sqlite:///`` SQLAlchemy URL; None for another database or an in-memory one."""
    prefix = "sqlite:///"
    if not conn.startswith(prefix):
        return None
    path = conn[len(prefix) :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def use_wal(database: Path) -> str:
    """Write-ahead logging for ``database``; returns the journal mode now in force (``wal``)."""
    with contextlib.closing(sqlite3.connect(database, timeout=BUSY_TIMEOUT_S)) as conn:
        return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])


def main() -> int:
    """``python -m pipelines_airflow.sqlite``: the Airflow database of this environment in WAL mode, if SQLite."""
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    conn = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or f"sqlite:///{home / 'airflow.db'}"
    database = database_file(conn)
    if database is None:
        return 0
    if not database.exists():
        print(f"error: no Airflow database at {database}: run `airflow db migrate` first", file=sys.stderr)
        return 2
    print(f"[airflow] {database}: journal mode {use_wal(database)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
