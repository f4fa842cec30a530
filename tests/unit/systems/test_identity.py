"""Input identities kept with a job model and compared (``pipelines.systems.identity``): no system needed."""

from __future__ import annotations

import json

import pytest

from pipelines.core.groupers import plan_job_model
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream
from pipelines.errors import InputRewoundError, StreamError
from pipelines.systems.identity import IDENTITY_KEY, check_same_streams, identities, recorded

CLICKS = SystemStream("kafka", "clicks")
VIEWS = SystemStream("kinesis", "views")


def model(config: dict[str, str]) -> JobModel:
    return JobModel.from_json(plan_job_model("j", 3, {CLICKS: 2}, config=config).to_json())


class Topics:
    """A system with ids, as ``SupportsIdentity`` asks."""

    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids

    def identity(self, stream: str) -> str:
        if stream not in self.ids:
            raise StreamError(f"no stream {stream}")
        return self.ids[stream]


class NoIds:
    pass


def test_ids_are_asked_of_the_systems_that_have_them_and_survive_the_models_round_trip() -> None:
    systems = {"kafka": Topics({"clicks": "RGj-pfYTSfO16XgR-BKNPA"}), "kinesis": NoIds()}
    ids = identities(systems.__getitem__, [VIEWS, CLICKS, CLICKS])
    assert ids == {"kafka.clicks": "RGj-pfYTSfO16XgR-BKNPA"}
    assert recorded(model({IDENTITY_KEY: json.dumps(ids)})) == ids


@pytest.mark.parametrize("kept", [None, "", "{", "[1]", '{"kafka.clicks": 5}'])
def test_a_model_without_readable_ids_is_not_checked(kept: str | None) -> None:
    config = {} if kept is None else {IDENTITY_KEY: kept}
    assert recorded(model(config)) == {}
    check_same_streams("j", 3, recorded(model(config)), {"kafka.clicks": "new"}, "then")  # nothing to compare


def test_another_id_under_the_name_is_refused_with_both_ids_and_what_to_do() -> None:
    with pytest.raises(InputRewoundError) as refused:
        check_same_streams("j", 3, {"kafka.clicks": "old-id"}, {"kafka.clicks": "new-id"}, "make a job afresh")
    text = str(refused.value)
    assert "kafka.clicks" in text and "old-id" in text and "new-id" in text and "model v3" in text
    assert text.endswith("make a job afresh")
    check_same_streams("j", 3, {"kafka.clicks": "same"}, {"kafka.clicks": "same"}, "then")
    check_same_streams("j", 3, {"kafka.clicks": "old-id"}, {}, "then")  # not asked now: not compared
