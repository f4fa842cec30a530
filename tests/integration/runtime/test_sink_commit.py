"""The sink's exactly-once commit with a kept table handle: replays skipped, a table made again is new."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from pipelines.runtime.sink import FileAdd, commit_files

EMPTY = pa.table({"n": pa.array([], pa.int64())})


def _file(table: Path, n: int) -> FileAdd:
    rel = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"n": [n]}), table / rel)
    return FileAdd(rel, (table / rel).stat().st_size, 1)


def test_a_replayed_batch_is_skipped_and_a_table_made_again_at_the_same_path_takes_the_same_app_ids(
    tmp_path: Path,
) -> None:
    table = tmp_path / "sink"
    write_deltalake(str(table), EMPTY)
    assert [commit_files(str(table), [_file(table, b)], "job/v1/q", b) for b in range(3)] == [True] * 3
    assert commit_files(str(table), [_file(table, 99)], "job/v1/q", 1) is False  # a replay: nothing twice
    assert sorted(DeltaTable(str(table)).to_pyarrow_table()["n"].to_pylist()) == [0, 1, 2]

    shutil.rmtree(table)  # the sink dropped and made again (same path, same job, same query id)
    write_deltalake(str(table), EMPTY)
    assert commit_files(str(table), [_file(table, 10)], "job/v1/q", 0) is True
    assert DeltaTable(str(table)).to_pyarrow_table()["n"].to_pylist() == [10]
