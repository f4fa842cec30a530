"""The ``dq_results`` table: one data-quality verdict per check per validated window (a run or a scaling event)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.control.table import TIMESTAMP, ControlTable, TableSpec, column
from pipelines.core.ssp import validate_name
from pipelines.storage.clock import StoreClock
from pipelines.storage.home import Home

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
            # added later (nullable, so older tables are upgraded in place): where to look further
            column("sample", pa.string(), nullable=True),  # JSON: the first offenders' key, stream, partition, offset
            column("docs_page", pa.string(), nullable=True),  # the Data Docs page, relative to the site's root
            column("dag_id", pa.string(), nullable=True),  # the Airflow DAG run that validated (none: the CLI)
            column("run_id", pa.string(), nullable=True),
        ]
    ),
    "Data-quality verdicts: one row per check per validated window (a run or a scaling event)",
    append_only=True,
)


@dataclass(frozen=True)
class DagRunRef:
    """The Airflow DAG run that produced a verdict, so the UI can link to it; a CLI validation has none."""

    dag_id: str
    run_id: str

    def columns(self) -> dict[str, str]:
        return {"dag_id": self.dag_id, "run_id": self.run_id}


class DqResults:
    def __init__(self, home: Home, clock: StoreClock | None = None) -> None:
        self.table = ControlTable(DQ_RESULTS, home, clock)

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """One commit for one validation's verdicts: job, window, check, success, observed, checked, and the
        optional examples, sample, docs_page, dag_id and run_id."""
        now = self.table.now()
        optional = {"examples": None, "sample": None, "docs_page": None, "dag_id": None, "run_id": None}
        prepared = [{**optional, "run_at": now, **row} for row in rows]
        for row in prepared:
            validate_name("job", row["job"])
        if prepared:
            self.table.append(prepared)

    def read(self, job: str) -> pd.DataFrame:
        return self.table.read(job).to_pandas().sort_values("run_at", kind="stable")
