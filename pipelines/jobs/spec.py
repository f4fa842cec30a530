"""The job YAML as a pydantic model: every field, its type, its default, its meaning, and the JSON schema.

``JobConfig.from_dict`` validates with ``JobSpec`` and keeps the result as the
plain ``JobConfig`` the rest of the platform reads. A model of its own, apart
from ``config``, so that reading a saved configuration (every query start's
source runner does, ``job_config``) does not load pydantic. The schema
published in ``docs/job-schema.json`` is generated from ``JobSpec``
(``python -m pipelines.jobs.schema``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, model_validator

from pipelines.control.metrics import DEFAULT_RETENTION_HOURS, MAX_RETENTION_HOURS
from pipelines.core.autosize import ALLOWED, DEFAULT_POLICY, SPLIT_MERGE, AutosizeConfig
from pipelines.core.dotted import is_dotted
from pipelines.core.durations import DURATION_PATTERN, parse_duration
from pipelines.core.groupers import GROUPERS
from pipelines.core.hashing import MAX_FACTOR, MAX_FACTOR_ENV, validate_factor
from pipelines.core.ssp import NAME_PATTERN, SYSTEMS, SystemStream, validate_name
from pipelines.core.start import WORDS, parse_start
from pipelines.core.state import DEFAULT_MAX_VALUE_BYTES, MAX_VALUE_BYTES, StateSpec, make_spec
from pipelines.errors import ConfigError
from pipelines.jobs.stores import StoreName, StoreSpec
from pipelines.settings import (
    AnyMapping,
    Check,
    Number,
    OneOf,
    Said,
    Section,
    Whole,
    check,
    section_error,
    sentence_error,
    value_error,
    verbatim_error,
)
from pipelines.systems.deltalog_settings import DeltaLogSettings
from pipelines.systems.kinesis.settings import KinesisSettings

MAX_BATCH_RECORDS = 1_000_000_000
"""Records per micro-batch at factor 1, at most: far past what one batch's memory holds, short of overflowing
the budget Spark carries as a 64-bit count once the factor multiplies it."""
MAX_CONTAINERS = 100_000
"""As many containers as the embedded log has partitions at most: each holds at least one virtual task."""

TRIGGERS = ("available-now", "continuous")

_NAME = {"type": "string", "pattern": NAME_PATTERN}
_START = {"anyOf": [{"enum": list(WORDS)}, {"type": "string", "format": "date-time"}]}


# ------------------------------------------------------------------ value checks of the job YAML


class _ImportPath(Check):
    def check(self, value: Any) -> str:
        if not isinstance(value, str) or ":" not in value:
            raise value_error("must be an import path 'package.module:function'")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": ":"}


class _Ddl(Check):
    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise value_error("must be a Spark DDL string such as 'key STRING, seq BIGINT'")
        return value.strip()

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": "\\S"}


class _TriggerInterval(Check):
    """How often a continuous job starts a micro-batch, in the platform's one duration grammar (zero: at once)."""

    def check(self, value: Any) -> str:
        try:
            parse_duration(value, "trigger_interval", zero=True)
        except ConfigError:
            raise value_error("must be a time such as '1 second', '500 milliseconds', '2 minutes' or '30s'") from None
        return str(value).strip()

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "string", "pattern": DURATION_PATTERN}, {"type": "number", "minimum": 0}]}


class _Factor(Check):
    def check(self, value: Any) -> int:
        try:
            return validate_factor(value)
        except ConfigError as error:
            raise sentence_error(str(error)) from None

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^\\s*[0-9]+\\s*$"}]}


class _Policy(Check):
    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not (value == DEFAULT_POLICY or is_dotted(value)):
            raise value_error(f"must be {DEFAULT_POLICY!r} or an import path 'package.module:Class'")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^({DEFAULT_POLICY}|[^:]+:[^:]+)$"}


class AutosizeSpec(Section):
    """The ``autosize:`` section: the autosizer's bounds and thresholds (docs/operations.md, "Autosizing")."""

    MAPPING_OF: ClassVar[str] = "autosize fields"

    min_factor: Annotated[int, Whole(1)] = Field(1, description="the smallest factor the autosizer picks")
    max_factor: Annotated[int, Whole(1)] = Field(16, description="the largest factor the autosizer picks")
    cooldown_s: Annotated[float, Number(0.0)] = Field(
        300.0, description="seconds after a scaling step ends before the next may be decided"
    )
    scale_up_busy: Annotated[float, Number(0.0, 1.0)] = Field(
        0.75, description="the busiest task's busy ratio above which a growing lag scales up"
    )
    scale_down_busy: Annotated[float, Number(0.0, 1.0)] = Field(
        0.25, description="the busiest task's busy ratio below which a small lag scales down"
    )
    lag_growth_records_per_s: Annotated[float, Number(0.0)] = Field(
        1.0, description="the lag's slope (records/s) above which it counts as growing"
    )
    small_lag_s: Annotated[float, Number(0.0)] = Field(
        30.0, description="a lag read in at most this many seconds at the observed rate counts as small"
    )
    window_batches: Annotated[int, Whole(1)] = Field(60, description="at most this many latest batches are observed")
    window_s: Annotated[float, Number(0.0, above=True)] = Field(
        300.0, description="only batches committed in the last window_s seconds are observed"
    )
    min_batches: Annotated[int, Whole(2)] = Field(
        5, description="fewer batches of the active model than this: hold (a trend needs two)"
    )
    allowed: Annotated[str, OneOf(*ALLOWED)] = Field(SPLIT_MERGE, description="which factors a decision may pick")
    policy: Annotated[str, _Policy()] = Field(
        DEFAULT_POLICY, description="'default' or 'package.module:Class' of an AutosizePolicy"
    )

    @model_validator(mode="after")
    def _fields_agree(self) -> AutosizeSpec:
        if self.min_factor > self.max_factor:
            raise verbatim_error(
                f"autosize.min_factor ({self.min_factor}) must be <= autosize.max_factor ({self.max_factor})"
            )
        if self.scale_down_busy >= self.scale_up_busy:
            raise verbatim_error(
                f"autosize.scale_down_busy ({self.scale_down_busy:g}) must be below autosize.scale_up_busy "
                f"({self.scale_up_busy:g}): the gap between them is what keeps the factor from flapping"
            )
        if self.window_batches < self.min_batches:
            raise verbatim_error(
                f"autosize.window_batches ({self.window_batches}) must be >= autosize.min_batches "
                f"({self.min_batches}), or no window could ever be enough"
            )
        return self

    def config(self) -> AutosizeConfig:
        return AutosizeConfig(**self.model_dump())


def autosize_config(raw: Any, where: str = "autosize settings") -> AutosizeConfig:
    """An ``autosize:`` mapping checked (as ``job create`` checks it) over the defaults; ``where`` names it."""
    spec: AutosizeSpec = check(AutosizeSpec, raw, where, ("autosize",))
    return spec.config()


class _KafkaSettings(Check):
    """The ``systems.kafka`` section, checked by the Kafka system's own ``validate_settings`` (loaded only if given)."""

    def check(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        from pipelines.systems.kafka.settings import validate_settings

        try:
            validate_settings(value, "systems.kafka")
        except ConfigError as error:
            raise verbatim_error(str(error)) from None
        return dict(value)

    def schema(self) -> dict[str, Any]:
        return {"type": ["object", "null"], "description": "the Kafka cluster; see docs/systems/kafka.md"}


def _table_shorthand(value: Any) -> Any:
    """``sink: enriched`` means ``sink: {table: enriched}``; anything but a mapping is taken as the table."""
    return value if isinstance(value, Mapping) else {"table": value}


def _table_name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise value_error("must be a table name")
    try:
        return validate_name("table", value)
    except ConfigError as error:
        raise sentence_error(str(error)) from None


# ------------------------------------------------------------------ the sections


class InputSpec(Section):
    """One input stream of the job."""

    NONE_IS_EMPTY = False

    system: Annotated[str, OneOf(*SYSTEMS)] = Field("deltalog", description="the input system")
    stream: Annotated[str, Said(partial(validate_name, "stream"), _NAME)] = Field(
        description="the stream's name in its system"
    )


class TableSpec(Section):
    """A Delta table in the job's home."""

    NONE_IS_EMPTY = False

    table: Annotated[str, BeforeValidator(_table_name, json_schema_input_type=str)] = Field(
        json_schema_extra={"pattern": NAME_PATTERN}
    )


Table = Annotated[TableSpec, BeforeValidator(_table_shorthand, json_schema_input_type=TableSpec | str)]


class BatchSpec(Section):
    """How much a micro-batch reads and how often one starts."""

    max_records: Annotated[int, Whole(1, MAX_BATCH_RECORDS)] = Field(
        10_000, description="records per micro-batch at factor 1; the budget grows with the factor"
    )
    trigger_interval: Annotated[str, _TriggerInterval()] = Field(
        "1 second", description="Spark's processing-time trigger"
    )


class SystemsSpec(Section):
    """Settings per input system; secrets never appear here."""

    deltalog: DeltaLogSettings | None = Field(None, description="the embedded Delta log")
    kafka: Annotated[dict[str, Any], _KafkaSettings()] | None = Field(None, description="a Kafka cluster")
    kinesis: KinesisSettings | None = Field(None, description="Amazon Kinesis Data Streams")


class StateSection(Section):
    """One keyed state of the job: a table of one row per key that follows its keys through every rescale."""

    NONE_IS_EMPTY = False

    name: Annotated[str, Said(partial(validate_name, "state"), _NAME)] = Field(
        description="the state's name: ctx.state['NAME'] in the process function, <home>/state/<job>/NAME"
    )
    value_schema: Annotated[str, _Ddl()] = Field(
        description="the value's columns as flat Spark DDL, e.g. 'events BIGINT, amount DOUBLE'; names may not "
        "start with '_' (the bookkeeping columns do)"
    )
    ttl: (
        Annotated[
            float,
            Said(
                lambda v: parse_duration(v, "ttl").total_seconds(),
                {"anyOf": [{"type": "string", "pattern": DURATION_PATTERN}, {"type": "number", "exclusiveMinimum": 0}]},
            ),
        ]
        | None
    ) = Field(
        None,
        description="time-to-live, such as '7d' or '12h' (seconds if a number): a key whose row no batch changed for "
        "this long starts afresh, and compaction removes its row; none by default",
    )
    max_value_bytes: Annotated[int, Whole(1, MAX_VALUE_BYTES)] = Field(
        DEFAULT_MAX_VALUE_BYTES,
        description="the largest value (a key's columns, strings and binaries by their bytes) a put may store; a "
        "larger one sends its record to the dead-letter table",
    )


def _state_list(value: Any) -> Any:
    """``state: {name: ...}`` is a list of one state."""
    return [value] if isinstance(value, Mapping) else value


def state_specs(sections: list[StateSection] | None, job: str) -> tuple[StateSpec, ...]:
    """The checked ``StateSpec`` of each section (its DDL parsed), refusing a name given twice."""
    from pipelines.jobs.output_schema import parse_output_schema

    specs = []
    for section in sections or []:
        try:
            columns = [(f.name, f.dataType.simpleString()) for f in parse_output_schema(section.value_schema).fields]
        except ConfigError as error:
            raise section_error(f"state {section.name!r}: value_schema: {error}") from None
        try:
            specs.append(make_spec(section.name, section.value_schema, columns, section.ttl, section.max_value_bytes))
        except ConfigError as error:
            raise section_error(str(error)) from None
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise section_error(f"job {job!r} declares state {', '.join(twice)} twice")
    return tuple(specs)


class JobSpec(Section):
    """A job's YAML file (``include/jobs/*.yaml``): what it reads, how it is split, what it runs, where it writes."""

    NONE_IS_EMPTY = False
    MAPPING_OF = "fields"

    name: Annotated[str, Said(partial(validate_name, "job"), _NAME)] = Field(description="the job's name")
    inputs: Annotated[list[InputSpec], BeforeValidator(lambda v: _non_empty_list(v))] = Field(
        description="the streams the job reads", min_length=1
    )
    grouper: Annotated[str, OneOf(*sorted(GROUPERS))] = Field(
        "GroupByPartition", description="how partitions are grouped into tasks, as Samza's SSP groupers do"
    )
    elasticity_factor: Annotated[int, _Factor()] = Field(
        1, description=f"key buckets per task, at most {MAX_FACTOR} unless {MAX_FACTOR_ENV} allows more"
    )
    containers: Annotated[int, Whole(1, MAX_CONTAINERS)] = Field(
        1, description="containers the virtual tasks are placed in"
    )
    process: Annotated[str, _ImportPath()] = Field(description="the function run on each virtual task's records")
    process_options: Annotated[dict[str, Any], AnyMapping()] = Field(
        default_factory=dict, description="passed to the process function as they are"
    )
    output_schema: Annotated[str, _Ddl()] = Field(
        description="the columns the process function emits, as flat Spark DDL"
    )
    sink: Table = Field(description="the Delta table the job's output rows are committed to")
    dead_letter: Table | None = Field(None, description="where records the function fails on go; <sink>_dead_letters")
    batch: BatchSpec = Field(default_factory=BatchSpec, description="micro-batch size and trigger")
    trigger: Annotated[str, OneOf(*TRIGGERS)] = Field(
        "continuous", description="continuous, or available-now: process what is there, then stop"
    )
    source: Annotated[dict[str, Any], AnyMapping()] = Field(
        default_factory=dict, description="options of the elastic source"
    )
    systems: SystemsSpec = Field(default_factory=SystemsSpec, description="settings per input system")
    autosize: AutosizeSpec = Field(
        default_factory=AutosizeSpec, description="the autosizer's bounds and thresholds (docs/operations.md)"
    )
    stores: dict[StoreName, StoreSpec] | None = Field(None, description="adjunct data stores the job looks keys up in")
    state: (
        Annotated[
            list[StateSection], BeforeValidator(_state_list, json_schema_input_type=list[StateSection] | StateSection)
        ]
        | None
    ) = Field(
        None,
        description="keyed state the process function keeps per key (ctx.state), in Delta tables of the home; one "
        "state or a list of them",
    )
    metrics_retention_hours: Annotated[int, Whole(1, MAX_RETENTION_HOURS)] = Field(
        DEFAULT_RETENTION_HOURS,
        description="hours the job's rows stay in the metrics table; older ones are deleted every 10 minutes "
        "while the job runs, when a run ends, and by 'pipelines job compact'",
    )
    start: Annotated[str, Said(parse_start, _START)] = Field(
        "earliest",
        description="where the job's first model reads each input partition from: earliest (every record there), "
        "latest (only records written after 'job create') or a time with its zone such as 2026-11-27T08:00:00Z "
        "(from each partition's first record at or after it; on kinesis, each shard's first record that arrived at "
        "or after it, latest being the time of 'job create'); partitions added later start at their earliest",
    )

    @model_validator(mode="after")
    def _inputs_once_and_names_fit(self) -> JobSpec:
        seen = [SystemStream(i.system, i.stream) for i in self.inputs]
        twice = sorted({str(s) for s in seen if seen.count(s) > 1})
        if twice:
            raise section_error(f"input {', '.join(twice)} is listed twice")
        if self.dead_letter is None:
            try:
                validate_name("dead_letter table", f"{self.sink.table}_dead_letters")
            except ConfigError as error:
                raise section_error(str(error)) from None
        state_specs(self.state, self.name)
        if self.dead_letter is not None and self.dead_letter.table == self.sink.table:
            # The failed records' rows (the record and its error) would land among the output rows, under another
            # schema, and verification would count them as output.
            raise section_error(
                f"dead_letter table {self.dead_letter.table!r} is the sink table; give the failed records a table "
                f"of their own (default {self.sink.table}_dead_letters)"
            )
        return self


def _non_empty_list(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise value_error("must be a non-empty list of {system, stream}")
    return value
