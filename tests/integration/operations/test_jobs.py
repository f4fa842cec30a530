"""Job creation refuses what would silently corrupt another job's output."""

from __future__ import annotations

import pytest

from pipelines.control import ControlPlane
from pipelines.errors import ConfigError
from pipelines.jobs.config import JobConfig
from pipelines.operations.jobs import create_job
from pipelines.storage.home import Home

from ..runtime.jobs import job, produce


def test_a_sink_belongs_to_one_job(home: Home) -> None:
    produce(home, "events", 20, keys=3)
    first = job(home, "first", 1)
    for sink, dead in ((first.sink_table, "second_dead"), ("second_out", first.sink_table)):
        second = JobConfig.from_dict(
            {**first.to_dict(), "name": "second", "sink": {"table": sink}, "dead_letter": {"table": dead}}
        )
        with pytest.raises(ConfigError, match="it is the sink of job 'first', and a table belongs to one job"):
            create_job(home, second)
    shares_dead = JobConfig.from_dict({**first.to_dict(), "name": "second", "sink": {"table": "second_out"}})
    with pytest.raises(ConfigError, match="it is the dead-letter table of job 'first'"):
        create_job(home, shares_dead)
    assert ControlPlane(home).job_models.jobs() == ["first"], "nothing is written for a refused job"
    create_job(
        home,
        JobConfig.from_dict(
            {
                **first.to_dict(),
                "name": "second",
                "sink": {"table": "second_out"},
                "dead_letter": {"table": "second_dead"},
            }
        ),
    )
    assert ControlPlane(home).job_models.jobs() == ["first", "second"]


def test_a_process_function_that_cannot_be_imported_is_refused_at_create(home: Home) -> None:
    produce(home, "events", 10, keys=2)
    config = job(home, "good", 1)
    typo = {**config.to_dict(), "name": "typo", "sink": {"table": "t_out"}, "dead_letter": {"table": "t_dead"}}
    typo["process"] = "pipelines.demo.enrich:proces"
    with pytest.raises(ConfigError, match=r"pipelines\.demo\.enrich has no callable 'proces'"):
        create_job(home, JobConfig.from_dict(typo))
    assert ControlPlane(home).job_models.jobs() == ["good"]
