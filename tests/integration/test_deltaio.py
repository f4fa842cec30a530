from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipelines.deltaio import read_delta


def _table(path: Path) -> None:
    for job, rows in (("a", range(0, 5)), ("b", range(5, 8)), ("a", range(8, 10))):
        data = pa.table({"job": [job] * len(rows), "n": pa.array(list(rows), pa.int64())})
        write_deltalake(str(path), data, mode="append", partition_by=["job"])


def test_partition_and_statistics_filters(tmp_path: Path) -> None:
    _table(tmp_path / "t")
    got = read_delta(tmp_path / "t", [("job", "=", "a"), ("n", ">=", 3)])
    assert sorted(got.column("n").to_pylist()) == [3, 4, 8, 9]
    assert set(got.column("job").to_pylist()) == {"a"}
    assert read_delta(tmp_path / "t", [("n", "in", [1, 6])]).num_rows == 2


def test_columns_added_later_read_as_nulls(tmp_path: Path) -> None:
    _table(tmp_path / "t")
    schema = pa.schema([("job", pa.string()), ("n", pa.int64()), ("extra", pa.string())])
    got = read_delta(tmp_path / "t", schema=schema)
    assert got.num_rows == 10 and got.column("extra").null_count == 10


def test_a_process_that_read_a_table_exits_cleanly(tmp_path: Path) -> None:
    # deltalake's pyarrow-dataset path aborted the interpreter at exit in about half of all runs here
    _table(tmp_path / "t")
    code = f"from pipelines.deltaio import read_delta; print(read_delta({str(tmp_path / 't')!r}).num_rows)"
    for _ in range(4):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout.strip()) == (0, "10"), done.stderr[-500:]


def test_a_folder_is_a_table_once_its_log_holds_a_commit_or_a_checkpoint(tmp_path: Path) -> None:
    from pipelines.deltaio import is_table

    log = tmp_path / "t" / "_delta_log"
    assert not is_table(tmp_path / "t") and not is_table(tmp_path / "missing")
    log.mkdir(parents=True)
    (log / "_last_checkpoint").write_text("{}")
    (log / ".00000000000000000000.json.tmp").write_text("{}")  # a writer's temporary file
    (log / "00000000000000000000.crc").write_text("{}")
    assert not is_table(tmp_path / "t")
    (log / "00000000000000000010.checkpoint.parquet").write_bytes(b"PAR1")  # a log whose commits were cleaned up
    assert is_table(tmp_path / "t")
    _table(tmp_path / "written")
    assert is_table(tmp_path / "written")


def test_open_if_table_lists_the_log_once_and_answers_none_where_no_table_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines.deltaio import open_if_table
    from pipelines.errors import DamagedTableError
    from pipelines.storage import objects

    listed: list[str] = []
    listing = objects.LocalStore.list
    monkeypatch.setattr(objects.LocalStore, "list", lambda self, loc: listed.append(str(loc)) or listing(self, loc))
    assert open_if_table(tmp_path / "missing") is None and len(listed) == 1
    _table(tmp_path / "t")
    listed.clear()
    dt = open_if_table(tmp_path / "t")
    assert dt is not None and dt.version() == 2 and len(listed) == 1 and listed[0].endswith("_delta_log")
    (tmp_path / "t" / "_delta_log" / "00000000000000000003.json").write_bytes(b"")  # a commit truncated to nothing
    with pytest.raises(DamagedTableError, match="is empty"):
        open_if_table(tmp_path / "t")
