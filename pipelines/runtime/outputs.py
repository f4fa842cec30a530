"""A job's output tables: the Delta sink and its dead-letter table, created with their schemas before the first batch.

The sink's schema is the job's ``output_schema`` plus the lineage every row
carries (``schemas.sink_schema``), so it belongs to the runtime that writes it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake.schema import Field as DeltaField

from pipelines.deltaio import create_table, open_if_table, readable
from pipelines.jobs.config import JobConfig
from pipelines.jobs.output_schema import parse_output_schema
from pipelines.runtime import schemas
from pipelines.storage.home import Home


def ensure_output_tables(home: Home, config: JobConfig, output: Any | None = None) -> None:
    """Create the sink and dead-letter Delta tables with their schemas, if they do not exist yet, and the tables
    of the job's states (``pipelines.state``)."""
    output = output or parse_output_schema(config.output_schema)
    for name, struct in (
        (config.sink_table, schemas.sink_schema(output)),
        (config.dead_letter_table, schemas.DEAD_LETTER),
    ):
        path = home.sinks / name
        dt = open_if_table(path)
        if dt is None:
            create_table(path, schemas.arrow(struct), mode="ignore")
            continue
        have = set(pa.schema(dt.schema().to_arrow()).names)
        missing = [f for f in schemas.arrow(struct) if f.name not in have]
        if missing:  # a new version's output_schema added columns (``jobs.config.check_config_change``)
            with readable(path):
                dt.alter.add_columns([DeltaField.from_arrow(f) for f in missing])
    if config.state:
        from pipelines.state.runtime import ensure_tables

        ensure_tables(home, config.name, config.state)
