"""An Airflow on SQLite (``scripts/airflow.sh``, the end-to-end tests): connect arguments and the journal mode.

SQLite has one writer at a time; Python's driver makes another wait 5 s, then fails with "database is locked".
On a loaded two-core machine the scheduler's transactions outlast that, and the API server answered a DAG's
unpause with 500 "Database error". A minute's wait queues the writer instead. Airflow reads these through
``[database] sql_alchemy_connect_args`` (and ``..._async`` for the API server's async engine).

Waiting is not enough where a reader holds the writer off from inside the API server itself: its audit-log
dependency is a coroutine that commits through a synchronous session, so while that commit waits for the lock
the server's event loop waits with it, and a request whose session the loop has yet to close keeps its read
lock: every component stalled for the whole busy wait (60 s, seen in a fresh-clone run of the suite) and the
UI's trigger got a 500. In write-ahead-log mode readers never block the writer; ``use_wal`` switches a
database to it once, after ``airflow db migrate`` (the mode is kept in the file).
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
