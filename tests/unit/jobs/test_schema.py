"""The published JSON schema of the job YAML: generated from the model, committed as is, and true of every job file."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig
from pipelines.jobs.schema import DOCS, job_schema, render

JOBS = sorted((Path(__file__).resolve().parents[3] / "include" / "jobs").glob("*.yaml"))


def test_the_committed_schema_is_the_generated_one() -> None:
    assert DOCS.read_text(encoding="utf-8") == render(), "run: python -m pipelines.jobs.schema --write"


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(job_schema())


@pytest.mark.parametrize("path", JOBS, ids=lambda p: p.name)
def test_every_shipped_job_file_validates_against_the_schema_and_the_model(path: Path) -> None:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(job_schema()).validate(raw)
    assert JobConfig.load(path).name == raw["name"]


def test_there_are_job_files_to_check() -> None:
    assert len(JOBS) >= 2


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"elasticty_factor": 4}, "a misspelled field"),
        ({"containers": "2"}, "a number given as text"),
        ({"trigger": "once"}, "a trigger Spark does not have"),
        ({"inputs": []}, "no input"),
        ({"batch": {"max_records": 0}}, "an empty micro-batch"),
        ({"systems": {"kinesis": {"regoin": "eu-west-1"}}}, "a misspelled system setting"),
        ({"stores": {"c": {"input": "c", "bootstrap": "yes"}}}, "a store flag that is not a boolean"),
    ],
)
def test_the_schema_refuses_what_the_model_refuses(change: dict[str, object], why: str) -> None:
    raw = {**yaml.safe_load(JOBS[0].read_text(encoding="utf-8")), **change}
    assert list(jsonschema.Draft202012Validator(job_schema()).iter_errors(raw)), why
    with pytest.raises(ConfigError):
        JobConfig.from_dict(raw)
