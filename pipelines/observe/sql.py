"""Spark SQL over a home's tables, for operators: ``python -m pipelines sql "SELECT ... FROM checkpoints"``.

Every table of the home is a temporary view of one Spark session, read by
delta-spark from the Delta tables the platform writes with delta-rs: each
control table under its own name (``job_models``, ``checkpoints``,
``scaling_events``, ``scaling_locks``, ``metrics``, ``dq_results``,
``autosize_decisions``, ``adjunct_checkpoints``), each embedded-log stream as
``stream_<name>`` and each job's sink and dead-letter table as
``sink_<table>`` (characters other than letters, digits and ``_`` become
``_``), and each job's keyed state as ``state_<job>_<state>``: one row per key
as of the job's last committed batch (its ``current`` table with the changes
after its last compaction folded in), beside the raw ``..._current`` and
``..._changes`` tables. Delta's own SQL works on paths too (``DESCRIBE HISTORY
delta.`<home>/control/metrics```).

Only queries run (``SELECT``, ``WITH``, ``VALUES``, ``TABLE``, ``SHOW``,
``DESCRIBE``, ``EXPLAIN``): the platform's writers own these tables and
commit to them while the jobs run, and a statement that wrote to one (a
``DELETE``, an ``OPTIMIZE``) would change a fact under a running driver.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pipelines.errors import PipelinesError
from pipelines.storage.home import Home
from pipelines.storage.location import Location

COMMANDS = ("show", "describe", "desc", "explain")
"""Statements that only read but are not queries to Spark's parser."""
WRITES = frozenset(
    {
        *("add", "alter", "analyze", "cache", "clear", "clone", "convert", "create", "delete", "drop", "fsck"),
        *("generate", "insert", "load", "merge", "msck", "optimize", "refresh", "reorg", "repair", "replace"),
        *("reset", "restore", "set", "truncate", "uncache", "update", "use", "vacuum"),
    }
)
"""First words of statements that are never a read: refused before a Spark session is started for them."""
ONLY_QUERIES = (
    "only queries run here (SELECT, WITH, VALUES, TABLE, SHOW, DESCRIBE, EXPLAIN): the platform's own writers own "
    "these tables"
)


class SqlError(PipelinesError):
    """A query that does not parse, names something unknown, or is not a read."""


@contextlib.contextmanager
def sql_session(master: str) -> Iterator[Any]:
    """A Spark session for one query, in UTC, stopped after it. Its JVM's log goes where every command's goes
    (``runtime.logs``: the home's log file, unless ``--verbose``). Its catalog's warehouse is a scratch folder
    removed after it: the views' catalog makes Spark create one, by default ``./spark-warehouse`` in whatever
    folder the operator ran the query from."""
    from pyspark.errors import PySparkException

    from pipelines.runtime.logs import target
    from pipelines.runtime.session import build_session

    with tempfile.TemporaryDirectory(prefix="pipelines-sql-warehouse-") as warehouse:
        confs = {"spark.sql.session.timeZone": "UTC", "spark.sql.warehouse.dir": warehouse}
        try:
            spark = build_session(master, app_name="pipelines-sql", **confs)
        except PySparkException as e:  # why is in the JVM's own lines: say where they are (unless --verbose)
            log = target()
            raise SqlError(f"Spark did not start: {_first_line(e)}{f' (its log: {log})' if log else ''}") from None
        try:
            yield spark
        finally:
            spark.stop()


def views(home: Home) -> dict[str, Location]:
    """View name -> Delta table, for every table of the home an operator asks about (on any store)."""
    store = home.store
    found: dict[str, Location] = {}
    for folder, prefix in ((home.control, ""), (home.streams, "stream_"), (home.sinks, "sink_")):
        for entry in sorted(store.list(folder), key=lambda e: e.name):
            if entry.is_dir and store.list(entry.location / "_delta_log"):
                found[prefix + re.sub(r"\W", "_", entry.name)] = entry.location
    return found


def state_views(home: Home) -> dict[str, tuple[Location, Location]]:
    """View name -> (``current``, ``changes``) of every job's every state in the home."""
    store = home.store
    found: dict[str, tuple[Location, Location]] = {}
    for job in sorted(store.list(home.root / "state"), key=lambda e: e.name):
        if not job.is_dir:
            continue
        for state in sorted(store.list(job.location), key=lambda e: e.name):
            current, changes = state.location / "current", state.location / "changes"
            if state.is_dir and store.list(current / "_delta_log") and store.list(changes / "_delta_log"):
                found["state_" + re.sub(r"\W", "_", f"{job.name}_{state.name}")] = (current, changes)
    return found


def register(spark: Any, home: Home) -> list[str]:
    """Every table of ``views`` as a temporary view of ``spark``; returns their names. Spark reads an S3 home's
    tables through s3a (hadoop-aws), configured from the same AWS variables as the home's own store."""
    names = []
    for name, place in views(home).items():
        _load(spark, place).createOrReplaceTempView(name)
        names.append(name)
    for name, (current, changes) in state_views(home).items():
        _load(spark, current).createOrReplaceTempView(f"{name}_current")
        _load(spark, changes).createOrReplaceTempView(f"{name}_changes")
        columns = spark.table(f"{name}_current").columns
        spark.sql(_live_state(name, _as_of(current), columns)).createOrReplaceTempView(name)
        names += [name, f"{name}_current", f"{name}_changes"]
    return names


def _load(spark: Any, place: Location) -> Any:
    return spark.read.format("delta").load(place.path if place.is_local else place.hadoop_uri())


def _as_of(current: Location) -> int:
    """The segment a state's ``current`` folds in (``pipelines.state.durable``): its newest compaction's label."""
    from pipelines.deltaio import open_table
    from pipelines.state.durable import SEGMENT_KEY

    for entry in open_table(current).history():
        if entry.get(SEGMENT_KEY) is not None:
            return int(entry[SEGMENT_KEY])
    return 0


def _live_state(name: str, as_of: int, columns: list[str]) -> str:
    """One row per key: each key's newest change after ``current``'s segment, else its row in ``current``."""
    listed = ", ".join(f"`{c}`" for c in columns)
    return f"""
        WITH newer AS (
            SELECT {listed} FROM (
                SELECT *, row_number() OVER (PARTITION BY key ORDER BY _segment DESC) AS _rank
                FROM {name}_changes WHERE _segment > {as_of}
            ) WHERE _rank = 1
        )
        SELECT {listed} FROM newer
        UNION ALL
        SELECT {listed} FROM {name}_current c WHERE NOT EXISTS (SELECT 1 FROM newer n WHERE n.key = c.key)
    """


def run_query(spark: Any, query: str) -> tuple[list[str], list[list[Any]]]:
    """Column names and rows of a read-only query, values made printable; ``SqlError`` otherwise."""
    from pyspark.errors import PySparkException
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # each failure's JVM stack, as JSON
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)  # on stderr: the one line below says it
    try:
        _refuse_writes(spark, query)
        frame = spark.sql(query)
        return list(frame.columns), [[_value(v) for v in row] for row in frame.collect()]
    except PySparkException as e:
        raise SqlError(_first_line(e)) from None


def _value(value: Any) -> Any:
    """A cell for a terminal or JSON: structs as objects, binary as text, times and decimals as ISO strings."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _value(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def _first_word(query: str) -> str:
    """The statement's first word, lower case, after leading blanks and comments; "" when there is none."""
    words = re.sub(r"^(\s|--[^\n]*(\n|$)|/\*.*?\*/)*", "", query, flags=re.S).split(None, 1)
    return words[0].lower() if words else ""


def refuse_before_spark(query: str) -> None:
    """Refuse what needs no parser to refuse (no statement, a statement that writes), in a second, with one line:
    a Spark session's start is ten seconds of a core and its own line on standard error."""
    word = _first_word(query)
    if not word:
        raise SqlError("no query given: pass one, e.g. 'SELECT * FROM job_models LIMIT 5'")
    if re.sub(r"\W.*", "", word, flags=re.S) in WRITES:
        raise SqlError(ONLY_QUERIES)


def refuse_without_home(home: Home) -> None:
    """Refuse a query on a home that does not exist, before Spark starts: a mistyped --home answered "table or
    view cannot be found" ten seconds later, and Spark's log file had made the home meanwhile. Reading commands
    answer a missing home from what it lacks (``job show``: "no job model in <home>/control"); this one has no
    tables at all. An object-store home exists when anything is under its prefix (S3 has no empty folders)."""
    exists = home.root.local_path().is_dir() if home.is_local else bool(home.store.list(home.root))
    if exists:
        return
    raise SqlError(
        f"there is no home at {home.root}: no tables to query; give the home of a deployment (--home or "
        "$PIPELINES_HOME)"
    )


def _refuse_writes(spark: Any, query: str) -> None:
    """Let through what Spark parses as a query, and the reading commands; anything else is refused unrun."""
    if _first_word(query) in COMMANDS:
        return
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        parser.parseQuery(query)
    except Exception:  # not a query: a syntax error (reported as it is) or a statement
        parser.parsePlan(query)  # raises the syntax error, if that is what it is
        raise SqlError(ONLY_QUERIES) from None


def _first_line(error: Exception) -> str:
    """Spark's message without its plan dump and SQLSTATE: the line that says what is wrong."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return re.sub(r"\s*SQLSTATE: \w+.*$", "", text)
