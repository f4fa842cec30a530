"""JobConfig: the shipped demo config loads, and every field a user can get wrong fails naming that field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.core.ssp import SystemStream
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig

ENRICHMENT_YAML = Path(__file__).resolve().parents[3] / "include" / "jobs" / "enrichment.yaml"

VALID: dict[str, Any] = {
    "name": "orders",
    "inputs": [{"system": "deltalog", "stream": "events"}],
    "process": "pipelines.demo.enrich:process",
    "output_schema": "key STRING, seq BIGINT",
    "sink": {"table": "enriched"},
}


def config(**changes: Any) -> dict[str, Any]:
    """A valid raw config with some top-level fields replaced; a value of ``...`` removes the field."""
    raw = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is ...:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def error_of(raw: Any, *, names_origin: bool = True) -> str:
    with pytest.raises(ConfigError) as info:
        JobConfig.from_dict(raw, origin="test.yaml")
    message = str(info.value)
    if names_origin:  # the message says which config file it is about
        assert message.startswith("test.yaml: "), message
    return message


# --- happy path ----------------------------------------------------------------------------------------------------


def test_the_shipped_enrichment_config_loads() -> None:
    raw = yaml.safe_load(ENRICHMENT_YAML.read_text())  # the demo's tuning values change; compare with the file
    job = JobConfig.load(ENRICHMENT_YAML)
    assert job.name == "enrichment"
    assert job.inputs == (SystemStream("deltalog", "events"),)
    assert job.grouper == "GroupByPartition"
    assert job.elasticity_factor == raw["elasticity_factor"]
    assert job.containers == raw["containers"]
    assert job.process == "pipelines.demo.enrich:process"
    assert job.output_schema == raw["output_schema"].strip()
    assert "seq BIGINT" in job.output_schema
    assert dict(job.process_options) == raw["process_options"]
    assert job.sink_table == "enriched"
    assert job.dead_letter_table == "enriched_dead_letters"
    assert job.max_records_per_batch == raw["batch"]["max_records"]
    assert job.trigger_interval == raw["batch"]["trigger_interval"]
    assert job.trigger == raw["trigger"]


def test_to_dict_round_trips() -> None:
    job = JobConfig.load(ENRICHMENT_YAML)
    assert JobConfig.from_dict(job.to_dict()) == job


def test_defaults_of_a_minimal_config() -> None:
    job = JobConfig.from_dict(config())
    assert job.grouper == "GroupByPartition"
    assert job.elasticity_factor == 1
    assert job.containers == 1
    assert dict(job.process_options) == {}
    assert job.dead_letter_table == "enriched_dead_letters"
    assert job.max_records_per_batch == 10_000
    assert job.trigger == "continuous"
    assert job.trigger_interval == "1 second"
    assert dict(job.source) == {}


def test_system_defaults_to_the_embedded_log_and_inputs_keep_their_order() -> None:
    job = JobConfig.from_dict(config(inputs=[{"stream": "b"}, {"system": "kafka", "stream": "a"}]))
    assert job.inputs == (SystemStream("deltalog", "b"), SystemStream("kafka", "a"))


def test_the_same_stream_name_on_two_systems_is_two_inputs() -> None:
    job = JobConfig.from_dict(config(inputs=[{"system": "kafka", "stream": "s"}, {"system": "kinesis", "stream": "s"}]))
    assert len(job.inputs) == 2


def test_a_digit_string_factor_is_accepted() -> None:
    assert JobConfig.from_dict(config(elasticity_factor="4")).elasticity_factor == 4


def test_sink_may_be_a_bare_table_name() -> None:
    assert JobConfig.from_dict(config(sink="enriched")).sink_table == "enriched"


def test_available_now_trigger_and_batch_options() -> None:
    job = JobConfig.from_dict(
        config(trigger="available-now", batch={"max_records": 5, "trigger_interval": "2 seconds"})
    )
    assert (job.trigger, job.max_records_per_batch, job.trigger_interval) == ("available-now", 5, "2 seconds")


def test_a_job_starts_at_the_earliest_position_unless_it_asks_for_the_latest() -> None:
    assert JobConfig.from_dict(config()).start == "earliest"
    job = JobConfig.from_dict(config(start="latest"))
    assert job.start == "latest"
    assert JobConfig.from_dict(job.to_dict()) == job == JobConfig.from_saved(job.to_dict())
    saved_before_the_field = {k: v for k, v in job.to_dict().items() if k != "start"}
    assert JobConfig.from_saved(saved_before_the_field).start == "earliest"


def test_a_job_may_start_at_a_time_kept_in_utc_to_the_millisecond() -> None:
    job = JobConfig.from_dict(config(start="2026-11-27T09:00:00+01:00"))
    assert job.start == "2026-11-27T08:00:00.000Z"
    assert JobConfig.from_saved(job.to_dict()).start == job.start


@pytest.mark.parametrize("start", ["newest", "LATEST ", 0, None, ["latest"], "2026-11-27T08:00:00"])
def test_a_start_other_than_earliest_latest_or_a_zoned_time_is_refused_naming_them(start: Any) -> None:
    message = error_of(config(start=start))
    assert message.startswith("test.yaml: start: "), message
    assert "earliest, latest, or a time with its zone" in message or "has no time zone" in message, message


# --- errors: each message names the field --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field", "bound"),
    [
        ({"metrics_retention_hours": 10**30}, "metrics_retention_hours", "876000"),  # overflowed a driver's compaction
        ({"batch": {"max_records": 10**30}}, "batch.max_records", "1e+09"),
        ({"containers": 10**30}, "containers", "100000"),
    ],
)
def test_absurdly_large_counts_are_refused_with_their_bound(changes: dict[str, Any], field: str, bound: str) -> None:
    message = error_of(config(**changes))
    assert f"'{field}' must be a whole number" in message and bound in message, message


@pytest.mark.parametrize("field", ["name", "inputs", "process", "output_schema", "sink"])
def test_a_missing_required_field_is_named(field: str) -> None:
    assert f"missing required field {field!r}" in error_of(config(**{field: ...}))


def test_not_a_mapping() -> None:
    assert "must be a mapping" in error_of(["name", "orders"])


@pytest.mark.parametrize("name", ["", "has space", "slash/ed", 42])
def test_bad_job_name(name: Any) -> None:
    assert "job name" in error_of(config(name=name))


@pytest.mark.parametrize("inputs", [[], {"stream": "events"}, "events"])
def test_inputs_must_be_a_non_empty_list(inputs: Any) -> None:
    assert "'inputs' must be a non-empty list" in error_of(config(inputs=inputs))


@pytest.mark.parametrize("item", [{"system": "deltalog"}, "events"])
def test_an_input_without_a_stream(item: Any) -> None:
    assert "inputs[1]" in error_of(config(inputs=[{"stream": "ok"}, item]))


def test_bad_system() -> None:
    message = error_of(config(inputs=[{"system": "pulsar", "stream": "events"}]))
    assert "inputs[0].system" in message
    assert "'pulsar'" in message


def test_bad_stream_name() -> None:
    assert "stream name" in error_of(config(inputs=[{"stream": "bad name"}]))


def test_duplicate_input() -> None:
    message = error_of(config(inputs=[{"stream": "events"}, {"system": "deltalog", "stream": "events"}]))
    assert "input deltalog.events is listed twice" in message


@pytest.mark.parametrize("dead_letter", [{"table": "enriched"}, "enriched"])
def test_the_dead_letter_table_is_not_the_sink_table(dead_letter: Any) -> None:
    message = error_of(config(dead_letter=dead_letter))
    assert "dead_letter table 'enriched' is the sink table" in message
    assert JobConfig.from_dict(config(dead_letter="failed")).dead_letter_table == "failed"


def test_unknown_grouper() -> None:
    message = error_of(config(grouper="GroupByMagic"))
    assert "grouper" in message
    assert "'GroupByMagic'" in message
    assert "GroupByPartition" in message  # the choices are listed


@pytest.mark.parametrize("factor", [0, -2, "abc", 1.5, True, None])
def test_bad_elasticity_factor(factor: Any) -> None:
    assert "elasticity factor" in error_of(config(elasticity_factor=factor))


def test_an_elasticity_factor_in_other_digits_or_too_long_says_what_it_must_be() -> None:
    """Python's ``invalid literal for int()`` (``'²'`` passed ``str.isdigit``) was the message; now the field's."""
    message = error_of(config(elasticity_factor="²"))
    assert message == "test.yaml: elasticity factor must be a whole number >= 1, got '²' (str): write it in digits 0-9"
    message = error_of(config(elasticity_factor="9" * 5000))
    assert message.endswith("(5,002 characters) is above the maximum 1024") and "int()" not in message


def test_a_start_past_the_last_time_a_timestamp_holds_is_refused() -> None:
    """``9999-12-31T23:59:59-14:00`` is in year 10000 in UTC: ``OverflowError`` ended ``job create``."""
    message = error_of(config(start="9999-12-31T23:59:59-14:00"))
    assert message == (
        "test.yaml: start: 9999-12-31T23:59:59-14:00 is after 9999-12-31T23:59:59Z, the last time a timestamp can "
        "hold: give an earlier one"
    )


@pytest.mark.parametrize("containers", [0, -1, "2", 1.0, True])
def test_bad_containers(containers: Any) -> None:
    assert "'containers'" in error_of(config(containers=containers))


@pytest.mark.parametrize("process", ["pipelines.demo.enrich.process", "", 7, None])
def test_bad_process_path(process: Any) -> None:
    assert "'process' must be an import path" in error_of(config(process=process))


@pytest.mark.parametrize("schema", ["", "   ", 5, ["key STRING"]])
def test_bad_output_schema(schema: Any) -> None:
    assert "'output_schema' must be a Spark DDL string" in error_of(config(output_schema=schema))


def test_output_schema_is_stripped() -> None:
    assert JobConfig.from_dict(config(output_schema="  key STRING \n")).output_schema == "key STRING"


def test_process_options_must_be_a_mapping() -> None:
    assert "'process_options'" in error_of(config(process_options=["latency_ms"]))


@pytest.mark.parametrize("sink", [{"table": ""}, {"table": 3}, 3])
def test_bad_sink_table(sink: Any) -> None:
    assert "'sink.table'" in error_of(config(sink=sink))


def test_a_sink_without_its_table_field_names_the_field_it_has() -> None:
    assert "sink: unknown field(s) 'name'; the fields are table" in error_of(config(sink={"name": "enriched"}))


@pytest.mark.parametrize(
    ("section", "value", "message"),
    [
        ("elasticty_factor", 4, "unknown field(s) 'elasticty_factor' (did you mean 'elasticity_factor'?)"),
        ("batch", {"max_record": 5}, "batch: unknown field(s) 'max_record' (did you mean 'max_records'?)"),
        ("systems", {"kafak": {}}, "systems: unknown field(s) 'kafak' (did you mean 'kafka'?)"),
        (
            "systems",
            {"deltalog": {"read_timeout": 60}},
            "systems.deltalog: unknown field(s) 'read_timeout' (did you mean 'read_timeout_s'?)",
        ),
        (
            "systems",
            {"deltalog": {"read_timeout_s": -1}},
            "'systems.deltalog.read_timeout_s' must be a number from 0 to 86400 (seconds a read",
        ),
    ],
)
def test_a_misspelled_field_is_refused_with_the_one_meant(section: str, value: Any, message: str) -> None:
    raw = config()
    raw[section] = value
    assert message in error_of(raw)


def test_an_input_with_an_unknown_field_is_refused() -> None:
    raw = config()
    raw["inputs"] = [{"system": "deltalog", "stream": "events", "partitions": 4}]
    assert "inputs[0]: unknown field(s) 'partitions'" in error_of(raw)


def test_bad_sink_table_name() -> None:
    assert "sink: table name 'no spaces' is invalid" in error_of(config(sink={"table": "no spaces"}))


@pytest.mark.parametrize("name", [".", ".."])
def test_a_name_of_dots_alone_is_refused_as_kafka_refuses_it_as_a_topic(name: str) -> None:
    """Kafka's Topic.validate refuses "." and ".."; as a folder of the home they name its parent or itself."""
    assert f"table name {name!r} is invalid" in error_of(config(sink={"table": name}))
    assert f"name {name!r} is invalid" in error_of(config(name=name))
    for fine in ("...", "a.b", ".hidden"):  # dots among other characters stay names, as in Kafka
        JobConfig.from_dict(config(sink={"table": fine}), origin="test.yaml")


def test_bad_dead_letter_table() -> None:
    assert "'dead_letter.table'" in error_of(config(dead_letter={"table": ""}))


def test_batch_must_be_a_mapping() -> None:
    assert "'batch'" in error_of(config(batch=[1]))


@pytest.mark.parametrize("max_records", [0, -5, "100", 2.5, False])
def test_bad_max_records(max_records: Any) -> None:
    assert "'batch.max_records'" in error_of(config(batch={"max_records": max_records}))


@pytest.mark.parametrize("trigger", ["once", "", "availableNow", 1])
def test_bad_trigger(trigger: Any) -> None:
    assert "'trigger'" in error_of(config(trigger=trigger))


def test_source_must_be_a_mapping() -> None:
    assert "'source'" in error_of(config(source="fast"))


# --- files ---------------------------------------------------------------------------------------------------------


def _load_error(path: Path, text: str) -> str:
    """The refusal of a config file holding ``text``."""
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        JobConfig.load(path)
    return str(info.value)


def test_invalid_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    message = _load_error(path, "name: [unclosed\ninputs: {\n")
    assert str(path) in message
    assert "not valid YAML" in message
    assert "\n" not in message, "one line: the CLI prints it as its one error line"


def test_invalid_yaml_is_named_by_line_and_column(tmp_path: Path) -> None:
    assert "at line 3, column 1" in _load_error(tmp_path / "broken.yaml", "name: j\ninputs: [\n")


DUPLICATES = [
    pytest.param("elasticity_factor: 1\nelasticity_factor: 4\n", "elasticity_factor", 6, 7, id="top-level"),
    pytest.param(
        "batch:\n  max_records: 5\n  trigger_interval: 1 second\n  max_records: 9\n", "max_records", 7, 9, id="nested"
    ),
    pytest.param("stores:\n  c:\n    input: customers\n    input: others\n", "input", 8, 9, id="stores-section"),
    pytest.param("systems: {kafka: {servers: a, servers: b}}\n", "servers", 6, 6, id="flow"),
    pytest.param("process_options:\n  items:\n    - {k: 1}\n    - k: 1\n      k: 2\n", "k", 9, 10, id="in-a-list"),
]
"""The refused copy of a valid config (five lines), the key written twice, and the lines of both."""

VALID_YAML = (
    "name: orders\ninputs: [{stream: events}]\nprocess: pipelines.demo.enrich:process\n"
    "output_schema: key STRING\nsink: {table: enriched}\n"
)


@pytest.mark.parametrize(("extra", "key", "first", "again"), DUPLICATES)
def test_a_key_written_twice_is_refused_naming_the_file_the_key_and_both_lines(
    tmp_path: Path, extra: str, key: str, first: int, again: int
) -> None:
    """Last-wins would run the job with a value the user may not have meant (factor 4 rather than 1)."""
    path = tmp_path / "job.yaml"
    message = _load_error(path, VALID_YAML + extra)
    assert message.startswith(f"job config {path} is not valid YAML: duplicate key '{key}' at line {again}, "), message
    assert f"(first at line {first}; the keys of a mapping must be unique)" in message
    assert "\n" not in message


def test_merge_keys_may_override_what_they_bring_in(tmp_path: Path) -> None:
    """``<<: *base`` then the same key is YAML's override, written once in the mapping: not a duplicate."""
    path = tmp_path / "job.yaml"
    merged = "process_options:\n  base: &b {latency_ms: 2, retries: 1}\n  live: {<<: *b, latency_ms: 5}\n"
    path.write_text(VALID_YAML + merged)
    assert dict(JobConfig.load(path).process_options)["live"] == {"latency_ms": 5, "retries": 1}


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        JobConfig.load(path)
    assert str(path) in str(info.value)
    assert "does not exist" in str(info.value)


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: orders\ninputs: [{stream: events}]\nprocess: pipelines.demo.enrich:process\noutput_schema: key STRING\n"
    )
    with pytest.raises(ConfigError) as info:
        JobConfig.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert "'sink'" in str(info.value)


def test_an_empty_file_is_not_a_config(tmp_path: Path) -> None:
    assert "must be a mapping" in _load_error(tmp_path / "empty.yaml", "")


@pytest.mark.parametrize("interval", ["1 second", "0 seconds", "500 milliseconds", "2 minutes", "interval 1 hour"])
def test_spark_trigger_intervals_are_accepted(interval: str) -> None:
    job = JobConfig.from_dict(config(batch={"max_records": 5, "trigger_interval": interval}))
    assert job.trigger_interval == interval


@pytest.mark.parametrize("interval", ["soon", "1 fortnight", "-1 second", "", True])
def test_a_trigger_interval_spark_would_refuse_later_is_refused_now(interval: Any) -> None:
    message = error_of(config(batch={"max_records": 5, "trigger_interval": interval}))
    assert "'batch.trigger_interval' must be a time such as '1 second'" in message


def test_a_job_config_that_is_not_utf8_or_a_directory_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "job.yaml"
    binary.write_bytes(b"name: x\n\xff\xfe")
    with pytest.raises(ConfigError, match="is not UTF-8 text \\(byte 8\\); save it as UTF-8"):
        JobConfig.load(binary)
    with pytest.raises(ConfigError, match="is a directory; give the job's YAML file"):
        JobConfig.load(tmp_path)


# --- saved configurations (read back from job models without checking them again) -------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {
            "grouper": "GroupByPartitionFixedTaskNum",
            "elasticity_factor": "4",
            "containers": 2,
            "trigger": "available-now",
        },
        {
            "sink": "bare",
            "dead_letter": {"table": "dl"},
            "batch": {"max_records": 7, "trigger_interval": " 2 seconds "},
        },
        {"systems": {"kinesis": None, "deltalog": {"read_timeout_s": 5}}, "autosize": {"min_factor": 2}},
        {"process_options": {"latency_ms": 2}, "source": {"x": 1}, "stores": {"c": {"input": "customers"}}},
    ],
)
def test_a_saved_configuration_reads_back_as_the_checked_one(changes: dict[str, Any]) -> None:
    checked = JobConfig.from_dict(config(**changes))
    assert JobConfig.from_saved(checked.to_dict()) == checked


def test_a_configuration_saved_before_newer_fields_existed_takes_their_defaults() -> None:
    saved = JobConfig.from_dict(config()).to_dict()
    for newer in ("systems", "autosize", "source", "stores", "containers"):
        saved.pop(newer, None)
    assert JobConfig.from_saved(saved) == JobConfig.from_dict(config())
