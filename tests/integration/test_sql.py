"""``pipelines sql``: Spark SQL over the home's tables, read-only, one ``error:`` line for a bad query."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from pipelines import cli
from pipelines.observe import sql
from pipelines.observe.sql import SqlError, register, run_query
from pipelines.runtime.logs import log_path
from pipelines.storage.home import Home
from pipelines.systems.deltalog import DeltaLog
from tests.integration.runtime.jobs import job

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def filled(home: Home) -> Home:
    """A home with a stream of 30 records over 2 partitions and a created job (its model, checkpoints, sink)."""
    log = DeltaLog(home.streams)
    log.create("events", 2)
    log.produce("events", [(f"k{i % 5}".encode(), b"{}", None) for i in range(30)])
    job(home, "sums", 2)
    return home


def test_every_table_of_the_home_is_a_view(spark: Any, filled: Home) -> None:
    names = register(spark, filled)
    assert {"job_models", "checkpoints", "stream_events", "sink_sums_out", "sink_sums_dead"} <= set(names)
    columns, rows = run_query(spark, "SELECT partition, count(*) AS records FROM stream_events GROUP BY 1 ORDER BY 1")
    ends = DeltaLog(filled.streams).end_positions("events")
    assert columns == ["partition", "records"]
    assert rows == [[p, int(ends[p])] for p in sorted(ends)]
    _, rows = run_query(spark, "SELECT DISTINCT job, version, factor FROM job_models")
    assert rows == [["sums", 1, 2]]


def test_only_queries_run_and_a_refused_statement_changes_nothing(spark: Any, filled: Home) -> None:
    register(spark, filled)
    models = filled.control_table("job_models")
    version = DeltaTable(str(models)).version()
    for statement in (
        "DELETE FROM job_models",
        f"OPTIMIZE delta.`{models}`",
        "WITH x AS (SELECT * FROM job_models) INSERT INTO job_models SELECT * FROM x",
        "DROP VIEW job_models",
    ):
        with pytest.raises(SqlError, match="only queries run here"):
            run_query(spark, statement)
    assert DeltaTable(str(models)).version() == version
    _, rows = run_query(spark, f"DESCRIBE HISTORY delta.`{models}`")  # Delta's own reading commands do run
    assert len(rows) == version + 1
    with pytest.raises(SqlError, match=r"^\[PARSE_SYNTAX_ERROR\] Syntax error at or near 'SELEC'\.$"):
        run_query(spark, "SELEC 1")
    with pytest.raises(SqlError, match=r"^\[TABLE_OR_VIEW_NOT_FOUND\] The table or view `nope` cannot be found"):
        run_query(spark, "SELECT * FROM nope")


def test_the_command_prints_a_table_or_json(spark: Any, filled: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def shared(master: str) -> Iterator[Any]:  # the test session's: a second one cannot start in this process
        yield spark

    monkeypatch.setattr(sql, "sql_session", shared)
    query = "SELECT stream, partition, key_bucket FROM checkpoints WHERE job = 'sums' ORDER BY partition, key_bucket"
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["--home", str(filled.root), "sql", query], out=out, err=err) == 0
    assert out.getvalue().splitlines() == [
        "stream  partition  key_bucket",
        "events  0          0",
        "events  0          1",
        "events  1          0",
        "events  1          1",
        "(4 rows)",
    ]
    out = io.StringIO()
    assert cli.main(["--home", str(filled.root), "sql", "--json", "SELECT 1 AS one, NULL AS none"], out=out) == 0
    assert json.loads(out.getvalue()) == [{"one": 1, "none": None}]

    def no_session(master: str) -> Iterator[Any]:
        raise AssertionError("a Spark session was started for a statement its first word refuses")

    monkeypatch.setattr(sql, "sql_session", no_session)
    for statement, error in (("DROP TABLE checkpoints", sql.ONLY_QUERIES), ("  ", "no query given: pass one")):
        err = io.StringIO()
        assert cli.main(["--home", str(filled.root), "sql", statement], out=io.StringIO(), err=err) == 2
        assert len(err.getvalue().splitlines()) == 1 and err.getvalue().startswith(f"error: {error}")


def test_a_query_on_a_home_that_does_not_exist_is_refused_before_spark_and_makes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped --home started Spark, whose log then made ``<home>/logs/pipelines.log`` (so the home), and
    answered "table or view `job_models` cannot be found" after two lines; other reading commands say at once
    that the home has nothing (``job show``: "no job model in <home>/control")."""

    def no_session(master: str) -> Iterator[Any]:
        raise AssertionError("a Spark session was started for a home that does not exist")

    monkeypatch.setattr(sql, "sql_session", no_session)
    missing = tmp_path / "new"
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["--home", str(missing), "--json", "sql", "SELECT * FROM job_models"], out=out, err=err) == 2
    assert err.getvalue() == (
        f"error: there is no home at {missing}: no tables to query; give the home of a deployment "
        "(--home or $PIPELINES_HOME)\n"
    )
    assert json.loads(out.getvalue())["error"] == "sql"
    assert not missing.exists()


@pytest.mark.slow  # its own Spark driver, in a process of its own
def test_bad_sql_is_one_error_line_and_exit_2_from_a_session_of_its_own(filled: Home, tmp_path: Path) -> None:
    """A failed query is its one ``error:`` line (where Spark's log went is no part of that answer); a query that
    runs still says where Spark's own lines went, once."""
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"}
    where = tmp_path / "cwd"
    where.mkdir()

    def query(text: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pipelines", "--home", str(filled.root), "sql", text]
        return subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=300)

    done = query("SELECT * FROM job_model")  # each query is a Spark application's start: one failing, one not
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "error: [TABLE_OR_VIEW_NOT_FOUND] The table or view `job_model` cannot be found. "
        "Verify the spelling and correctness of the schema and catalog.\n",
    )
    assert "NativeCodeLoader" in log_path(filled).read_text()  # Spark's own lines and the JVM's stack: in the log
    done = query("SELECT DISTINCT job FROM job_models")
    assert (done.returncode, done.stdout) == (0, "job\nsums\n(1 row)\n"), done
    assert done.stderr == f"Spark's and Airflow's own log lines go to {log_path(filled)} (--verbose shows them here)\n"
    assert list(where.iterdir()) == [], "the query left a spark-warehouse (or anything) where it was run"


@pytest.mark.slow  # spark-class runs (and finds no java)
def test_a_spark_that_does_not_start_is_one_error_line_naming_its_log(filled: Home, tmp_path: Path) -> None:
    """The reason a JVM did not start is in its own lines, which went to the home's log: the one line names it."""
    env = {k: v for k, v in os.environ.items() if k != "PIPELINES_HOME"} | {"JAVA_HOME": str(tmp_path / "no-java")}
    argv = [sys.executable, "-m", "pipelines", "--home", str(filled.root), "sql", "SELECT 1"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: Spark did not start: [JAVA_GATEWAY_EXITED]"), done.stderr
    assert done.stderr.endswith(f" (its log: {log_path(filled)})\n") and len(done.stderr.splitlines()) == 1
    assert f"{tmp_path / 'no-java'}/bin/java: No such file or directory" in log_path(filled).read_text()
