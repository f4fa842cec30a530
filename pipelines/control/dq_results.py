"""The ``dq_results`` table: one data-quality verdict per check per validated window (a run or a scaling event)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.control.home import Home
from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, column, utc_now
from pipelines.core.ssp import validate_name

if TYPE_CHECKING:
    import pandas as pd

DQ_RESULTS = TableSpec(
    "dq_results",
    pa.schema(
        [
            column("job", pa.string()),
            column("window", pa.string()),  # "run:<id>" or "event:<scaling event id>"
            column("check", pa.string()),  # no_loss | no_duplicates | key_order | routing | dead_letters
            column("success", pa.bool_()),
            column("observed", pa.int64()),  # offending rows (dead_letters: the count)
            column("checked", pa.int64()),  # rows or records the check looked at
            column("examples", pa.string(), nullable=True),  # first offenders, named by key and offset
            column("run_at", TIMESTAMP),
        ]
    ),
    "Data-quality verdicts: one row per check per validated window (a run or a scaling event)",
    append_only=True,
)


class DqResults:
    def __init__(self, home: Home) -> None:
        self.table = ControlTable(DQ_RESULTS, home)

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """One commit for one validation's verdicts: job, window, check, success, observed, checked, examples?."""
        now = utc_now()
        prepared = [{"examples": None, "run_at": now, **row} for row in rows]
        for row in prepared:
            validate_name("job", row["job"])
        if prepared:
            self.table.append(prepared)

    def read(self, job: str) -> pd.DataFrame:
        return self.table.read(job).to_pandas().sort_values("run_at", kind="stable")
