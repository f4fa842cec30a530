"""A job's configuration, read from YAML (``include/jobs/*.yaml``) and checked before anything runs.

Every field a user can get wrong is checked here with a message naming the
field, so a bad config fails at ``job create`` rather than inside a Spark
task; a field no section has is refused with the one it was probably meant to
be. Each model version carries the configuration it was planned from
(``job_config``), so a version is self-contained.

Input systems are configured once per job in ``systems:``, keyed by system
name (``kafka: {bootstrap_servers: ..., properties: {...}}``); each system
module validates its own settings (``validate_settings``), and secrets never
appear there in clear.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.core.autosize import AutosizeConfig
from pipelines.core.groupers import GROUPERS
from pipelines.core.hashing import validate_factor
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream, validate_name
from pipelines.errors import ConfigError, refuse_unknown

SYSTEMS = ("deltalog", "kafka", "kinesis")
TRIGGERS = ("available-now", "continuous")
CONFIG_KEY = "job_config"
"""Where a job model keeps the configuration it was planned from."""

FIELDS = (
    "name",
    "inputs",
    "grouper",
    "elasticity_factor",
    "containers",
    "process",
    "process_options",
    "output_schema",
    "sink",
    "dead_letter",
    "batch",
    "trigger",
    "source",
    "systems",
    "autosize",
    "stores",
)


@dataclass(frozen=True)
class JobConfig:
    name: str
    inputs: tuple[SystemStream, ...]
    process: str  # "package.module:function"
    output_schema: str  # Spark DDL of the columns the process function emits, e.g. "key STRING, seq BIGINT"
    sink_table: str
    dead_letter_table: str
    grouper: str = "GroupByPartition"
    elasticity_factor: int = 1
    containers: int = 1
    process_options: Mapping[str, Any] = field(default_factory=dict)
    max_records_per_batch: int = 10_000
    trigger: str = "continuous"
    trigger_interval: str = "1 second"
    source: Mapping[str, Any] = field(default_factory=dict)
    systems: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Settings per input system (``systems: {kafka: {...}}``), as written; checked by each system's module."""
    autosize: Mapping[str, Any] = field(default_factory=dict)
    """The ``autosize:`` section as written (absent fields take ``AutosizeConfig``'s defaults when it is read)."""
    stores: Any = None
    """The ``stores:`` section (adjunct data stores) as written."""

    def to_dict(self) -> dict[str, Any]:
        """The YAML form; stored with every job model so a model says what it was planned for."""
        return {
            "name": self.name,
            "inputs": [{"system": s.system, "stream": s.stream} for s in self.inputs],
            "grouper": self.grouper,
            "elasticity_factor": self.elasticity_factor,
            "containers": self.containers,
            "process": self.process,
            "process_options": dict(self.process_options),
            "output_schema": self.output_schema,
            "sink": {"table": self.sink_table},
            "dead_letter": {"table": self.dead_letter_table},
            "batch": {"max_records": self.max_records_per_batch, "trigger_interval": self.trigger_interval},
            "trigger": self.trigger,
            "source": dict(self.source),
            "systems": {k: dict(v) for k, v in self.systems.items()},
            "autosize": dict(self.autosize),
            **({"stores": self.stores} if self.stores is not None else {}),
        }

    def system_settings(self, system: str) -> Mapping[str, Any]:
        """The ``systems:`` settings of one input system (empty when the job gives none)."""
        return self.systems.get(system, {})

    def autosize_config(self) -> AutosizeConfig:
        """The autosizer's bounds and thresholds: the ``autosize:`` section over the defaults."""
        return AutosizeConfig.from_mapping(self.autosize)

    @classmethod
    def from_dict(cls, raw: Any, origin: str = "job config") -> JobConfig:
        if not isinstance(raw, dict):
            raise ConfigError(f"{origin}: must be a mapping of fields, got {type(raw).__name__}")
        refuse_unknown(origin, raw, FIELDS)

        def need(key: str) -> Any:
            if key not in raw:
                raise ConfigError(f"{origin}: missing required field {key!r}")
            return raw[key]

        def named(kind: str, value: Any) -> str:
            try:
                return validate_name(kind, value)
            except ConfigError as e:
                raise ConfigError(f"{origin}: {e}") from None

        name = named("job", need("name"))
        inputs_raw = need("inputs")
        if not isinstance(inputs_raw, list) or not inputs_raw:
            raise ConfigError(f"{origin}: 'inputs' must be a non-empty list of {{system, stream}}")
        inputs = []
        for i, item in enumerate(inputs_raw):
            if not isinstance(item, dict) or "stream" not in item:
                raise ConfigError(f"{origin}: inputs[{i}] must have a 'stream' (and optionally 'system')")
            refuse_unknown(f"{origin}: inputs[{i}]", item, ("system", "stream"))
            system = item.get("system", "deltalog")
            if system not in SYSTEMS:
                raise ConfigError(f"{origin}: inputs[{i}].system {system!r} is not one of {', '.join(SYSTEMS)}")
            inputs.append(SystemStream(system, named("stream", item["stream"])))
        twice = sorted({str(s) for s in inputs if inputs.count(s) > 1})
        if twice:
            raise ConfigError(f"{origin}: input {', '.join(twice)} is listed twice")
        grouper = raw.get("grouper", "GroupByPartition")
        if grouper not in GROUPERS:
            raise ConfigError(f"{origin}: unknown grouper {grouper!r}; choose one of {', '.join(sorted(GROUPERS))}")
        try:
            factor = validate_factor(raw.get("elasticity_factor", 1))
        except ConfigError as e:
            raise ConfigError(f"{origin}: {e}") from None
        containers = raw.get("containers", 1)
        if not isinstance(containers, int) or isinstance(containers, bool) or containers < 1:
            raise ConfigError(f"{origin}: 'containers' must be a whole number >= 1, got {containers!r}")
        process = need("process")
        if not isinstance(process, str) or ":" not in process:
            raise ConfigError(f"{origin}: 'process' must be an import path 'package.module:function', got {process!r}")
        output_schema = need("output_schema")
        if not isinstance(output_schema, str) or not output_schema.strip():
            raise ConfigError(f"{origin}: 'output_schema' must be a Spark DDL string such as 'key STRING, seq BIGINT'")
        options = raw.get("process_options", {}) or {}
        if not isinstance(options, dict):
            raise ConfigError(f"{origin}: 'process_options' must be a mapping")
        sink = named("sink table", _table(raw, "sink", origin))
        dead = named("dead_letter table", _table(raw, "dead_letter", origin, default=f"{sink}_dead_letters"))
        batch = raw.get("batch", {}) or {}
        if not isinstance(batch, dict):
            raise ConfigError(f"{origin}: 'batch' must be a mapping")
        refuse_unknown(f"{origin}: batch", batch, ("max_records", "trigger_interval"))
        max_records = batch.get("max_records", 10_000)
        if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
            raise ConfigError(f"{origin}: 'batch.max_records' must be a whole number >= 1, got {max_records!r}")
        interval = _interval(batch.get("trigger_interval", "1 second"), origin)
        trigger = raw.get("trigger", "continuous")
        if trigger not in TRIGGERS:
            raise ConfigError(f"{origin}: 'trigger' must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
        source = raw.get("source", {}) or {}
        if not isinstance(source, dict):
            raise ConfigError(f"{origin}: 'source' must be a mapping")
        systems = _systems(raw.get("systems"), origin)
        autosize = raw.get("autosize", {}) or {}
        try:
            AutosizeConfig.from_mapping(autosize)  # refuse a bad value now, not at the first evaluation
        except ConfigError as e:
            raise ConfigError(f"{origin}: {e}") from None
        return cls(
            name=name,
            inputs=tuple(inputs),
            process=process,
            output_schema=output_schema.strip(),
            sink_table=sink,
            dead_letter_table=dead,
            grouper=grouper,
            elasticity_factor=factor,
            containers=containers,
            process_options=options,
            max_records_per_batch=max_records,
            trigger=trigger,
            trigger_interval=interval,
            source=source,
            systems=systems,
            autosize=dict(autosize),
            stores=raw.get("stores"),
        )

    @classmethod
    def load(cls, path: str | Path) -> JobConfig:
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"job config {path} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"job config {path} is a directory; give the job's YAML file") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"job config {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
        except OSError as e:
            raise ConfigError(f"cannot read job config {path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"job config {path} is not valid YAML: {e}") from None
        return cls.from_dict(raw, origin=str(path))


_INTERVAL = re.compile(
    r"^(interval\s+)?\d+(\.\d+)?\s*(milliseconds?|ms|seconds?|s|minutes?|min|hours?|h)$", re.IGNORECASE
)


def _interval(value: Any, origin: str) -> str:
    """Spark's processing-time interval ("1 second", "500 milliseconds"), checked now rather than inside Spark."""
    text = str(value).strip()
    if isinstance(value, bool) or not _INTERVAL.match(text):
        raise ConfigError(
            f"{origin}: 'batch.trigger_interval' must be a time such as '1 second', '500 milliseconds' or "
            f"'2 minutes', got {value!r}"
        )
    return text


_SECONDS_PER = {"ms": 0.001, "millisecond": 0.001, "s": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0}
_SECONDS_PER |= {"h": 3600.0, "hour": 3600.0}


def interval_seconds(text: str) -> float:
    """A checked ``trigger_interval`` ("1 second", "500 milliseconds", "interval 2 minutes") in seconds."""
    found = re.match(r"^(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]+)$", text.strip().lower())
    if found is None:
        raise ConfigError(f"not a trigger interval: {text!r}")
    unit = found.group(2)
    return float(found.group(1)) * _SECONDS_PER[unit if unit in _SECONDS_PER else unit.removesuffix("s")]


def job_config(model: JobModel) -> JobConfig:
    """The configuration a model was planned from (stored in the model, so each version is self-contained)."""
    try:
        raw = json.loads(model.config[CONFIG_KEY])
    except KeyError:
        raise ConfigError(f"job model {model.job_name} v{model.version} carries no job configuration") from None
    return JobConfig.from_dict(raw, origin=f"job {model.job_name} v{model.version}")


def _systems(raw: Any, origin: str) -> dict[str, dict[str, Any]]:
    """The ``systems:`` section: settings per system name, each checked by its system's module if it checks."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: 'systems' must be a mapping of system name to its settings")
    refuse_unknown(f"{origin}: systems", raw, SYSTEMS)
    result = {}
    for name, settings in raw.items():
        if settings is None:
            settings = {}
        if not isinstance(settings, dict):
            raise ConfigError(f"{origin}: systems.{name} must be a mapping of settings")
        try:
            module = importlib.import_module(f"pipelines.systems.{name}")
        except ImportError:
            module = None
        validate = getattr(module, "validate_settings", None)
        if validate is not None:
            validate(settings, f"{origin}: systems.{name}")
        result[name] = dict(settings)
    return result


def _table(raw: dict[str, Any], key: str, origin: str, default: str | None = None) -> str:
    value = raw.get(key)
    if value is None:
        if default is None:
            raise ConfigError(f"{origin}: missing required field {key!r} (a mapping with 'table')")
        return default
    if isinstance(value, dict):
        refuse_unknown(f"{origin}: {key}", value, ("table",))
    table = value.get("table") if isinstance(value, dict) else value
    if not isinstance(table, str) or not table:
        raise ConfigError(f"{origin}: '{key}.table' must be a table name")
    return table
