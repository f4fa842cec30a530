"""Reading Delta tables without deltalake's pyarrow-dataset path.

``DeltaTable.to_pyarrow_dataset()`` / ``to_pandas()`` leave threads behind that
abort the interpreter at exit about half the time on this stack (delta-rs
issue #2184: "terminate called without an active exception"; measured 5 of 10
runs here), which turns a successful CLI command or Airflow task into exit code
134. So every read goes through ``read_delta``: it plans from the table's add
actions (partition values and min/max statistics prune files) and opens the
parquet files with pyarrow directly.

Every open, read and write of a table in the home goes through here, on a
local disk or on S3 alike (the store's ``delta_options`` go to delta-rs, its
``pyarrow.fs`` file system reads the data files), and so does the one
translation of a damaged table: a truncated or garbled commit in
``_delta_log`` (delta-rs's ``DeltaError``) or a damaged or missing data file
(pyarrow's errors) becomes a ``DamagedTableError`` that names the table, the
damaged file and what to do, instead of a traceback from deep in a command.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from pipelines.errors import DamagedTableError, StoreUnavailableError, one_line, store_unanswered
from pipelines.storage.location import Location, parse
from pipelines.storage.objects import Entry, store_for, unanswered

TableRef = DeltaTable | Location | str | os.PathLike[str]

_COMMIT = re.compile(r"\d{20}\.json")  # a commit of the Delta log (not a writer's temporary file)

Condition = tuple[str, str, Any]  # (column, "=" | "!=" | "<" | "<=" | ">" | ">=" | "in", value)


def read_delta(
    table: TableRef,
    where: Sequence[Condition] = (),
    columns: Sequence[str] | None = None,
    schema: pa.Schema | None = None,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> pa.Table:
    """Rows matching every condition, as ``schema`` (default: the table's), missing columns as nulls.

    ``keep`` may rule out more files by their add action (flattened: ``partition.<column>``, ``min.<column>``...),
    for a choice the conditions cannot say (a key bucket of another factor, say).
    """
    dt = table if isinstance(table, DeltaTable) else open_table(table)
    root = table_location(dt)
    store = store_for(root)
    filesystem = store.filesystem()
    with readable(root):
        schema = schema or pa.schema(dt.schema().to_arrow())
        partition_cols = list(dt.metadata().partition_columns)
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    pieces = []
    for action in actions:
        values = {c: action.get(f"partition.{c}") for c in partition_cols}
        if not all(_may_match(action, values, cond) for cond in where):
            continue
        if keep is not None and not keep(action):
            continue
        with readable(root):
            data = _data_file(store, filesystem, root / unquote(action["path"]), int(action.get("size_bytes") or 0))
        for c in partition_cols:
            dtype = schema.field(c).type if c in schema.names else pa.string()
            data = data.append_column(c, pa.array([values[c]] * data.num_rows).cast(dtype))
        pieces.append(_conform(data, schema))
    result = pa.concat_tables(pieces) if pieces else schema.empty_table()
    if where:
        result = result.filter(_expression(where))
    return result.select(list(columns)) if columns is not None else result


def file_batches(
    table: DeltaTable, action: dict[str, Any], schema: pa.Schema, batch_rows: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """One data file of an unpartitioned table (its flattened add action), batch by batch, as ``schema``: a file
    read without holding it whole (a large state's files are tens of megabytes)."""
    root = table_location(table)
    store = store_for(root)
    loc = root / unquote(action["path"])
    with readable(root):
        parquet = pq.ParquetFile(store.arrow_path(loc), filesystem=store.filesystem())
        for batch in parquet.iter_batches(batch_size=batch_rows):
            yield from _conform(pa.Table.from_batches([batch]), schema).to_batches()


CACHED_FILE_BYTES = 1 << 20
"""Data files up to this size are kept parsed, per process: they are immutable (a new commit adds new files), and a
driver reads the same control-table files again and again; on object storage each read is a request."""
CACHE_BYTES = 64 << 20
WHOLE_READ_BYTES = 16 << 20
"""A data file up to this size is read with one GET on object storage (pyarrow's reader asks HEAD, then ranges)."""

_FILES: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
_FILES_BYTES = 0
_FILES_LOCK = threading.Lock()


def forget_parsed_files() -> None:
    """Empty this process's cache of parsed files: a benchmark's read then costs what a fresh process's does."""
    global _FILES_BYTES
    with _FILES_LOCK:
        _FILES.clear()
        _FILES_BYTES = 0


def _data_file(store: Any, filesystem: Any, loc: Location, size: int) -> pa.Table:
    """One data file of a table, parsed; small ones from this process's cache of immutable files."""
    global _FILES_BYTES
    key = (str(loc), size)
    with _FILES_LOCK:
        cached = _FILES.get(key)
        if cached is not None:
            _FILES.move_to_end(key)
            return cached
    if not store.is_local() and 0 < size <= WHOLE_READ_BYTES:
        data = pq.read_table(pa.BufferReader(store.read(loc)))
    else:
        data = pq.read_table(store.arrow_path(loc), filesystem=filesystem)
    if 0 < size <= CACHED_FILE_BYTES:
        with _FILES_LOCK:
            _FILES[key] = data
            _FILES_BYTES += data.nbytes
            while _FILES_BYTES > CACHE_BYTES and _FILES:
                _, dropped = _FILES.popitem(last=False)
                _FILES_BYTES -= dropped.nbytes
    return data


def read_delta_pandas(table: TableRef, where: Sequence[Condition] = ()) -> Any:
    return read_delta(table, where).to_pandas()


def location(path: Location | str | os.PathLike[str]) -> Location:
    return parse(path, what="a table")


def table_location(dt: DeltaTable) -> Location:
    uri = dt.table_uri
    return parse(unquote(uri[len("file://") :]) if uri.startswith("file://") else uri, what="a table")


_LOG_FILE = re.compile(
    r"\d{20}\.(json|checkpoint\.parquet|checkpoint\.\d{10}\.\d{10}\.parquet|checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet))"
)
"""A commit or a checkpoint (classic, multi-part or V2) of a Delta log: what makes a folder a table."""


def is_table(path: Location | str | os.PathLike[str]) -> bool:
    """Whether a Delta log with a commit or a checkpoint is at ``path``, by one listing of ``_delta_log``.

    delta-rs's ``DeltaTable.is_deltatable`` asks the same, but holds Python's
    GIL while it waits for the store: a store that stopped answering froze
    every thread of the process (a driver's heartbeat and its stop requests
    among them) for delta-rs's whole retry window, three minutes. The home's
    own client waits without holding it.
    """
    return _holds_table(_log_entries(location(path)))


def _holds_table(log: list[Entry]) -> bool:
    return any(not entry.is_dir and _LOG_FILE.fullmatch(entry.name) for entry in log)


def _log_entries(loc: Location) -> list[Entry]:
    """The table's ``_delta_log`` listed through the home's own client (boto3 on S3); a store that does not answer
    is a ``StoreUnavailableError``, as delta-rs's failures are (``readable``), never botocore's own error."""
    try:
        return store_for(loc).list(loc / "_delta_log")
    except Exception as error:
        if unanswered(error):
            raise _unavailable(loc, error) from None
        raise


def open_table(path: Location | str | os.PathLike[str]) -> DeltaTable:
    """The table at its latest version; a damaged log is a ``DamagedTableError``, never a traceback."""
    loc = location(path)
    return _open(loc, _log_entries(loc))


def open_if_table(path: Location | str | os.PathLike[str]) -> DeltaTable | None:
    """``open_table``, or None where no table is (``is_table``): one listing of ``_delta_log`` answers both, where
    asking ``is_table`` first listed it twice (on S3 a paged LIST of every commit, at each open)."""
    loc = location(path)
    log = _log_entries(loc)
    return _open(loc, log) if _holds_table(log) else None


def _open(loc: Location, log: list[Entry]) -> DeltaTable:
    _check_commits(loc, log)
    with readable(loc):
        return DeltaTable(loc.uri, storage_options=store_for(loc).delta_options())


def create_table(path: Location | str | os.PathLike[str], schema: Any, **kwargs: Any) -> DeltaTable:
    """``DeltaTable.create`` in the home (its folder made where the store has folders)."""
    loc = location(path)
    store = store_for(loc)
    store.makedirs(loc)
    return DeltaTable.create(loc.uri, schema, storage_options=store.delta_options(), **kwargs)


def append(
    table: TableRef, data: pa.Table, *, commit_properties: CommitProperties | None = None, **kwargs: Any
) -> None:
    """One ``write_deltalake`` append to a table of the home (creating it if ``table`` names a new place)."""
    if isinstance(table, DeltaTable):
        write_deltalake(table, data, mode="append", commit_properties=commit_properties, **kwargs)
        return
    loc = location(table)
    store = store_for(loc)
    store.makedirs(loc)
    write_deltalake(
        loc.uri,
        data,
        mode="append",
        commit_properties=commit_properties,
        storage_options=store.delta_options(),
        **kwargs,
    )


def refresh(dt: DeltaTable) -> None:
    """``update_incremental`` with the same translation: a commit damaged since the open is reported, too."""
    with readable(table_location(dt)):
        dt.update_incremental()


def _check_commits(loc: Location, log: list[Entry]) -> None:
    """Refuse a table with an empty commit file: delta-rs reads one as a commit without actions.

    A commit truncated to nothing (a full disk, a crash of a copy) would then
    silently drop a fact, e.g. a job model's activation; everything else wrong
    with a commit delta-rs refuses itself. One listing of ``_delta_log`` per open.
    """
    for entry in log:
        if _COMMIT.fullmatch(entry.name) and not entry.is_dir and entry.size == 0:
            raise damaged(loc, f"its commit _delta_log/{entry.name} is empty (truncated)", commit=entry.name)


@contextmanager
def readable(path: Location | str | os.PathLike[str]) -> Iterator[None]:
    """Translate delta-rs and pyarrow failures while reading the table at ``path`` into ``DamagedTableError``,
    or into ``StoreUnavailableError`` when the store did not answer (an outage is not damage: telling an
    operator to restore a table the store merely failed to serve would lose data).

    A lost commit race (``CommitFailedError``) is no damage and passes, and so
    does a ``PermissionError``: the home is not readable, which the CLI reports
    with the path as it is.
    """
    loc = location(path)
    try:
        yield
    except (CommitFailedError, PermissionError, DamagedTableError, StoreUnavailableError):
        raise
    except (DeltaError, pa.ArrowException, OSError) as error:
        if store_unanswered(str(error)):
            raise _unavailable(loc, error) from None
        raise _damage(loc, error) from None


def _unavailable(loc: Location, error: BaseException) -> StoreUnavailableError:
    text = str(error)
    kwargs = getattr(error, "kwargs", None)  # botocore's connection errors keep urllib3's reason there
    cause = kwargs.get("error") if isinstance(kwargs, dict) else None
    if isinstance(cause, BaseException) and str(cause) not in text:
        text = f"{text}: {cause}"  # "... Connection refused", "... timed out": the reason, not only the URL
    line = one_line(text)  # the chain's last causes say why (a timeout, a 503): keep them
    detail = line if len(line) <= 300 else f"{line[:100]} ... {line[-180:]}"
    return StoreUnavailableError(
        f"the store of {loc} did not answer or failed the request ({detail}); nothing was changed: "
        "the data is where it was, and the same call works when the store answers"
    )


def _damage(loc: Location, error: BaseException) -> DamagedTableError:
    """What is wrong with the table ``error`` reports: a missing table or log, a garbled commit, a bad data file."""
    if isinstance(error, TableNotFoundError):
        if store_for(loc).list(loc / "_delta_log"):
            return damaged(loc, "its Delta log holds no commit")
        return damaged(loc, "it does not exist (no _delta_log)", missing=True)
    if isinstance(error, DeltaError):
        commit = _damaged_commit(loc)
        where = f"its commit _delta_log/{commit} is truncated or garbled" if commit else "its Delta log is unreadable"
        return damaged(loc, f"{where} ({_first_line(error)})", commit=commit)
    name = getattr(error, "filename", None) or _named_file(str(error)) or "a data file"
    for prefix in {str(loc).rstrip("/") + "/", store_for(loc).arrow_path(loc).rstrip("/") + "/"}:
        if str(name).startswith(prefix):
            name = str(name)[len(prefix) :]
    kind = "is missing" if isinstance(error, FileNotFoundError) else "is damaged"
    detail = _first_line(error, limit=None).rpartition("': ")[2][:300]  # pyarrow repeats the path: once is enough
    return damaged(loc, f"data file {name} {kind} ({detail})", data_file=str(name))


def damaged(
    path: Location | str | os.PathLike[str],
    problem: str,
    *,
    commit: str | None = None,
    data_file: str | None = None,
    missing: bool = False,
) -> DamagedTableError:
    """The message every damaged table gets: which table, what is wrong with it, what to do; nothing was changed."""
    where = location(path)
    kinds = {"control": "control table", "streams": "stream", "sinks": "sink table"}
    kind = kinds.get(where.parent.name, "Delta table")
    if missing:
        fix = f"restore {where} from a backup (a job's sink tables are made by job create)"
    elif commit is not None and commit.split(".")[0].isdigit() and int(commit.split(".")[0]) == 0:
        fix = f"restore {where} from a backup ({commit} is its first commit: there is no earlier version to go back to)"
    elif commit is not None and commit.split(".")[0].isdigit():
        version = int(commit.split(".")[0])
        fix = (
            f"restore {where} from a backup; or, if {commit} is the table's latest commit, move it out of "
            f"_delta_log to return the table to version {version - 1} (the change that commit made is lost)"
        )
    elif data_file is not None:
        fix = (
            f"restore {where} (or that file) from a backup; or return the table to a version from before the file "
            f"was added, using its history: deltalake's DeltaTable({str(where)!r}).history() lists the versions and "
            ".restore(VERSION) goes back to one (the rows of that file are lost)"
        )
    else:
        fix = f"restore {where} from a backup, or return it to an earlier version from the Delta table's history"
    return DamagedTableError(
        f"{kind} {where.name!r} at {where} cannot be read: {problem}; nothing was changed. To fix: {fix}"
    )


def _damaged_commit(path: Location) -> str | None:
    """The first commit file of the log that is empty or not JSON lines (only on an error: it reads the log)."""
    log = path / "_delta_log"
    store = store_for(path)
    try:
        names = sorted(e.name for e in store.list(log) if _COMMIT.fullmatch(e.name))
    except OSError:
        return None
    for name in names:
        try:
            lines = store.read(log / name).decode("utf-8").splitlines()
            if not lines:
                return name
            for line in lines:
                if line.strip():
                    json.loads(line)
        except (OSError, UnicodeDecodeError, ValueError):
            return name
    return None


def _named_file(message: str) -> str | None:
    """pyarrow names the file in its message ("... input source '/path/x.parquet': ...")."""
    start = message.find("'")
    end = message.find("'", start + 1)
    return message[start + 1 : end] if 0 <= start < end else None


def _first_line(error: BaseException, limit: int | None = 300) -> str:
    text = str(error).strip().splitlines()
    return text[0][:limit] if text else type(error).__name__


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for field in schema:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:  # a column added after this file was written
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _may_match(action: dict[str, Any], partitions: dict[str, Any], cond: Condition) -> bool:
    """False only when the file's partition value or min/max statistics rule the condition out."""
    column, op, value = cond
    if column in partitions:
        actual = partitions[column]
        return _compare(_coerce(actual, value), op, value)
    low, high = action.get(f"min.{column}"), action.get(f"max.{column}")
    if low is None or high is None:
        return True
    if op == "=":
        return bool(low <= value <= high)
    if op == "in":
        return any(low <= v <= high for v in value)
    if op in (">", ">="):
        return bool(high > value if op == ">" else high >= value)
    if op in ("<", "<="):
        return bool(low < value if op == "<" else low <= value)
    return True


def _coerce(actual: Any, like: Any) -> Any:
    sample = next(iter(like)) if isinstance(like, list | tuple | set | frozenset) else like
    if actual is None or isinstance(sample, str):
        return actual
    try:
        return type(sample)(actual)
    except (TypeError, ValueError):
        return actual


def _compare(actual: Any, op: str, value: Any) -> bool:
    ops: dict[str, Callable[[], Any]] = {
        "=": lambda: actual == value,
        "!=": lambda: actual != value,
        "<": lambda: actual < value,
        "<=": lambda: actual <= value,
        ">": lambda: actual > value,
        ">=": lambda: actual >= value,
        "in": lambda: actual in value,
    }
    return bool(ops[op]())


def _expression(where: Sequence[Condition]) -> pc.Expression:
    expr = None
    for column, op, value in where:
        field = pc.field(column)
        term = {
            "=": lambda f, v: f == v,
            "!=": lambda f, v: f != v,
            "<": lambda f, v: f < v,
            "<=": lambda f, v: f <= v,
            ">": lambda f, v: f > v,
            ">=": lambda f, v: f >= v,
            "in": lambda f, v: f.isin(list(v)),
        }[op](field, value)
        expr = term if expr is None else expr & term
    return expr
