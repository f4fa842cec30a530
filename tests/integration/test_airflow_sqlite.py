"""The Airflow database on SQLite in write-ahead-log mode: what ``scripts/airflow.sh`` and the e2e tests set."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

from pipelines_airflow.sqlite import database_file, use_wal


def test_the_file_of_a_sqlite_url_and_none_for_another_database() -> None:
    assert database_file("sqlite:////srv/airflow/airflow.db") == Path("/srv/airflow/airflow.db")
    assert database_file("sqlite:////srv/airflow/airflow.db?timeout=30") == Path("/srv/airflow/airflow.db")
    assert database_file("sqlite:///:memory:") is None
    assert database_file("postgresql+psycopg2://airflow@db/airflow") is None


def test_wal_is_kept_in_the_file_and_a_reader_no_longer_blocks_a_writer(tmp_path: Path) -> None:
    db = tmp_path / "airflow.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE log (id INTEGER)")
        conn.commit()
    assert use_wal(db) == "wal"
    reader, writer = sqlite3.connect(db, timeout=0.1), sqlite3.connect(db, timeout=0.1)
    with contextlib.closing(reader), contextlib.closing(writer):
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        reader.execute("BEGIN")
        reader.execute("SELECT * FROM log").fetchall()  # a read transaction left open, as a stalled request's
        writer.execute("INSERT INTO log VALUES (1)")
        writer.commit()  # in the default rollback journal: "database is locked" after the 0.1 s busy wait


def test_the_command_switches_the_environments_database_and_refuses_a_missing_one(tmp_path: Path) -> None:
    db = tmp_path / "airflow.db"
    sqlite3.connect(db).close()
    env = {"AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pipelines_airflow.sqlite"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "journal mode wal" in done.stderr, done.stderr
    db.unlink()
    done = subprocess.run([sys.executable, "-m", "pipelines_airflow.sqlite"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert not db.exists(), "nothing was created"
