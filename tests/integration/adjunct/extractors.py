"""Extractors the adjunct tests name by path, as a job's YAML would."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def upper(records: pa.Table) -> pa.Table:
    """Keys as they are, values upper-cased (an Arrow extractor)."""
    values = pc.utf8_upper(records["value"].cast(pa.string())).cast(pa.binary())
    return pa.table({"key": records["key"], "value": values})
