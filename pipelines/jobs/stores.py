"""The ``stores:`` section of a job YAML as a pydantic model (see ``pipelines.adjunct.config`` for the section).

A module of its own so that what only reads stores (the source runner of
every query start) does not load pydantic; ``config.parse_stores`` and the
job's ``JobSpec`` validate with it.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from pipelines.core.adjunct import Dataset, Partitioning, Persistence
from pipelines.core.durations import DURATION_PATTERN, parse_duration
from pipelines.core.ssp import NAME_PATTERN, SYSTEMS, validate_name
from pipelines.settings import Check, OneOf, PositiveWhole, Said, Section, StrictBool, value_error

DEFAULT_EXTRACTOR = "default"
DEFAULT_BATCH_RECORDS = 100_000

_NAME_SCHEMA = {"type": "string", "pattern": NAME_PATTERN}


class _Extractor(Check):
    """``default``, or an import path (whether it imports is checked by ``parse_stores``, not by the schema)."""

    def check(self, value: Any) -> str:
        if value is None:
            return DEFAULT_EXTRACTOR
        if not isinstance(value, str) or not value.strip():
            raise value_error("must be 'default' or 'package.module:function'")
        text = value.strip()
        if text != DEFAULT_EXTRACTOR and ":" not in text:
            raise value_error("must be 'default' or 'package.module:function'")
        return text

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [{"const": DEFAULT_EXTRACTOR}, {"type": "string", "pattern": ":"}, {"type": "null"}]}


def _stream_shorthand(value: Any) -> Any:
    return {"stream": value} if isinstance(value, str) else value


class StoreInput(Section):
    """The AD stream a store is filled from."""

    NONE_IS_EMPTY = False

    system: Annotated[str, OneOf(*SYSTEMS)] = Field("deltalog", description="the input system")
    stream: Annotated[str, Said(partial(validate_name, "stream"), _NAME_SCHEMA)] = Field(
        description="the stream's name in its system"
    )


class StoreSpec(Section):
    """One adjunct data store, as the job YAML's ``stores:`` section gives it."""

    input: Annotated[StoreInput, BeforeValidator(_stream_shorthand, json_schema_input_type=StoreInput | str)] = Field(
        description="the AD stream, e.g. {system: deltalog, stream: customers}; a bare name means deltalog"
    )
    extractor: Annotated[str, _Extractor()] = Field(
        DEFAULT_EXTRACTOR, description="default: the record's key and value; or package.module:function"
    )
    partitioning: Annotated[str, OneOf(*(m.value for m in Partitioning))] = Field(
        Partitioning.BROADCAST.value, description="broadcast: every task sees everything; partitioned: its keys"
    )
    persistence: Annotated[str, OneOf(*(m.value for m in Persistence))] = Field(
        Persistence.PERSISTENT.value, description="persistent: local disk; memory: RAM, rebuilt on restart"
    )
    bootstrap: StrictBool = Field(False, description="filled to the stream's end before the first main-input batch")
    valid_for: (
        Annotated[
            timedelta,
            Said(
                partial(parse_duration, what="valid_for"),
                {"anyOf": [{"type": "string", "pattern": DURATION_PATTERN}, {"type": "number", "exclusiveMinimum": 0}]},
            ),
        ]
        | None
    ) = Field(None, description="older than this at a restart: re-created; absent: never too old")
    dataset: Annotated[str, OneOf(*(m.value for m in Dataset))] = Field(
        Dataset.UNBOUNDED.value, description="unbounded: a change stream; bounded: versions sealed by end markers"
    )
    batch_records: PositiveWhole = Field(
        DEFAULT_BATCH_RECORDS, description="most records ingested per store before one micro-batch"
    )


StoreName = Annotated[str, Said(partial(validate_name, "store"), _NAME_SCHEMA)]
Stores = dict[StoreName, StoreSpec]
"""The ``stores:`` section: store name to its settings."""
