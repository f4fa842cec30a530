"""A job's configuration, read from YAML (``include/jobs/*.yaml``) and checked before anything runs.

Every field a user can get wrong is checked, by the pydantic model
``pipelines.jobs.spec.JobSpec``, with a message naming the field, so a bad
config fails at ``job create`` rather than inside a Spark task; a field no
section has is refused with the one it was probably meant to be. What passes
is kept as the plain ``JobConfig`` the platform reads. Each model version
carries the configuration it was planned from (``job_config``), so a version
is self-contained; it is read back without being checked again.

Input systems are configured once per job in ``systems:``, keyed by system
name (``kafka: {bootstrap_servers: ..., properties: {...}}``), each section
checked by its system's settings model, and secrets never appear there in
clear. The YAML's JSON schema is ``docs/job-schema.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines import yamlfile
from pipelines.control.job_models import CONFIG_KEY
from pipelines.control.metrics import DEFAULT_RETENTION_HOURS
from pipelines.core.autosize import AutosizeConfig
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream
from pipelines.core.state import StateSpec, check_evolution, make_spec
from pipelines.errors import ConfigError

__all__ = ["CONFIG_KEY", "JobConfig", "check_config_change", "job_config"]


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
    metrics_retention_hours: int = DEFAULT_RETENTION_HOURS
    """How long the job's rows stay in the ``metrics`` table (``control.compaction``); Kafka's default retention."""
    state: tuple[StateSpec, ...] = ()
    """The keyed states the process function keeps (``state:``; ``pipelines.core.state``), in the order written."""
    start: str = "earliest"
    """Where version 1 reads each partition from (``planning.plan_first``): ``earliest``, ``latest`` (the end at
    ``job create``), as Kafka's ``auto.offset.reset`` and Spark's ``startingOffsets`` name them, or a time in UTC
    (``core.start``: the first record at or after it, Kafka's ``offsetsForTimes``)."""

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
            "metrics_retention_hours": self.metrics_retention_hours,
            "start": self.start,
            **({"stores": self.stores} if self.stores is not None else {}),
            **({"state": [state_section(s) for s in self.state]} if self.state else {}),
        }

    def system_settings(self, system: str) -> Mapping[str, Any]:
        """The ``systems:`` settings of one input system (empty when the job gives none)."""
        return self.systems.get(system, {})

    def autosize_config(self) -> AutosizeConfig:
        """The autosizer's bounds and thresholds: the ``autosize:`` section over the defaults."""
        return AutosizeConfig(**self.autosize)  # checked by ``AutosizeSpec`` when the job was created

    @classmethod
    def from_dict(cls, raw: Any, origin: str = "job config") -> JobConfig:
        """The configuration ``raw`` (the YAML's mapping) gives, checked by ``JobSpec``; ``origin`` names it."""
        from pipelines.jobs.spec import JobSpec, state_specs
        from pipelines.settings import check

        spec: JobSpec = check(JobSpec, raw, origin)
        sink = spec.sink.table
        written = raw.get("systems") or {}
        return cls(
            name=spec.name,
            inputs=tuple(SystemStream(i.system, i.stream) for i in spec.inputs),
            process=spec.process,
            output_schema=spec.output_schema,
            sink_table=sink,
            dead_letter_table=spec.dead_letter.table if spec.dead_letter else f"{sink}_dead_letters",
            grouper=spec.grouper,
            elasticity_factor=spec.elasticity_factor,
            containers=spec.containers,
            process_options=spec.process_options,
            max_records_per_batch=spec.batch.max_records,
            trigger=spec.trigger,
            trigger_interval=spec.batch.trigger_interval,
            source=spec.source,
            systems={name: dict(settings or {}) for name, settings in written.items()},  # as written
            autosize=spec.autosize.model_dump(exclude_unset=True),  # as written, its numbers as numbers
            stores=raw.get("stores"),
            metrics_retention_hours=spec.metrics_retention_hours,
            start=spec.start,
            state=state_specs(spec.state, spec.name),
        )

    @classmethod
    def from_saved(cls, raw: Mapping[str, Any]) -> JobConfig:
        """A configuration as ``to_dict`` saved it with a job model, after ``from_dict`` had checked it.

        Not checked again: the source runner of every query start reads the
        saved configuration, and checking it would load pydantic on that
        path for nothing. Fields an older version did not save take their
        defaults, as ``from_dict`` would give them.
        """
        known: dict[str, Any] = {
            "name": raw["name"],
            "inputs": tuple(SystemStream(i.get("system", "deltalog"), i["stream"]) for i in raw["inputs"]),
            "process": raw["process"],
            "output_schema": raw["output_schema"],
            "sink_table": raw["sink"]["table"],
            "dead_letter_table": raw["dead_letter"]["table"],
        }
        for key in (
            "grouper",
            "elasticity_factor",
            "containers",
            "trigger",
            "process_options",
            "source",
            "autosize",
            "metrics_retention_hours",
            "start",
        ):
            if raw.get(key) is not None:
                known[key] = raw[key]
        batch = raw.get("batch") or {}
        if "max_records" in batch:
            known["max_records_per_batch"] = batch["max_records"]
        if "trigger_interval" in batch:
            known["trigger_interval"] = batch["trigger_interval"]
        known["systems"] = {name: dict(settings or {}) for name, settings in (raw.get("systems") or {}).items()}
        known["stores"] = raw.get("stores")
        known["state"] = tuple(saved_state(s) for s in raw.get("state") or ())
        return cls(**known)

    @classmethod
    def load(cls, path: str | Path) -> JobConfig:
        path = Path(path)
        try:
            raw = yamlfile.load(path.read_text(encoding="utf-8"))  # a key written twice is refused
        except FileNotFoundError:
            raise ConfigError(f"job config {path} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"job config {path} is a directory; give the job's YAML file") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"job config {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
        except OSError as e:
            raise ConfigError(f"cannot read job config {path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"job config {path} is not valid YAML: {_yaml_problem(e)}") from None
        return cls.from_dict(raw, origin=str(path))


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's complaint on one line (its own text spans four, with a caret under the spot): problem, where."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem is None:
        return " ".join(str(error).split())
    mark = error.problem_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    context = f" ({error.context})" if error.context else ""
    return f"{error.problem}{where}{context}"


CHANGEABLE = frozenset(
    {
        "process",
        "process_options",
        "output_schema",
        "state",
        "batch",
        "trigger",
        "autosize",
        "metrics_retention_hours",
        "source",
        "elasticity_factor",
        "grouper",
        "containers",
    }
)
"""What a new model version may change of a job's configuration (``rescale --config``); the rest (its inputs,
tables, stores, systems and start) names what the job is, and a different one is another job."""


def check_config_change(old: JobConfig, new: JobConfig) -> None:
    """Refuse a new configuration of a running job unless it keeps what the job is and what its tables hold.

    The inputs, tables, adjunct stores, input systems' settings and start stay as they are; the output schema
    and each state's value schema may only add columns (rows already written keep theirs and read the new ones
    as null); states are declared at ``job create``.
    """
    if new.name != old.name:
        raise ConfigError(f"the new configuration names job {new.name!r}, not {old.name!r}")
    before, after = old.to_dict(), new.to_dict()
    fixed = sorted(k for k in set(before) | set(after) if k not in CHANGEABLE and before.get(k) != after.get(k))
    if fixed:
        raise ConfigError(
            f"job {old.name!r}: a new version cannot change {', '.join(fixed)} (what the job reads, where it writes "
            "and from where it started); create a job afresh for that"
        )
    from pipelines.jobs.output_schema import parse_output_schema

    was = {f.name: f.dataType.simpleString() for f in parse_output_schema(old.output_schema).fields}
    now = {f.name: f.dataType.simpleString() for f in parse_output_schema(new.output_schema).fields}
    for name, kind in was.items():
        if now.get(name) != kind:
            change = "drops" if name not in now else f"changes to {now[name]}"
            raise ConfigError(
                f"job {old.name!r}: the new output_schema {change} column {name!r} ({kind}); the sink's schema may "
                "only add columns"
            )
    added = sorted({s.name for s in new.state} - {s.name for s in old.state})
    if added:
        raise ConfigError(
            f"job {old.name!r}: the new configuration adds state {', '.join(added)}; a job's states are declared "
            "when it is created (a new state would count none of the records before it), so create a job afresh"
        )
    check_evolution(old.name, old.state, new.state)


def state_section(spec: StateSpec) -> dict[str, Any]:
    """A state as its YAML section says it (what ``to_dict`` saves, and ``from_dict`` reads again)."""
    section: dict[str, Any] = {"name": spec.name, "value_schema": spec.schema, "max_value_bytes": spec.max_value_bytes}
    if spec.ttl_s is not None:
        section["ttl"] = spec.ttl_s
    return section


def saved_state(raw: Mapping[str, Any]) -> StateSpec:
    """A saved state section read back without pydantic (its DDL was checked when it was saved)."""
    from pipelines.jobs.output_schema import parse_output_schema

    columns = [(f.name, f.dataType.simpleString()) for f in parse_output_schema(raw["value_schema"]).fields]
    return make_spec(raw["name"], raw["value_schema"], columns, raw.get("ttl"), raw.get("max_value_bytes"))


def job_config(model: JobModel) -> JobConfig:
    """The configuration a model was planned from (stored in the model, so each version is self-contained)."""
    try:
        raw = json.loads(model.config[CONFIG_KEY])
    except KeyError:
        raise ConfigError(f"job model {model.job_name} v{model.version} carries no job configuration") from None
    try:
        return JobConfig.from_saved(raw)
    except (KeyError, TypeError, AttributeError) as error:
        raise ConfigError(
            f"job {model.job_name} v{model.version}: its saved configuration is damaged ({type(error).__name__}: "
            f"{error}); plan a new version from the job's YAML"
        ) from None
