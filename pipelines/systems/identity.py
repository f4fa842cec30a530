"""Which streams a job's checkpoints are in: each input's identity, recorded with every job model, compared later.

Offsets start over in a stream deleted and created again under its name (a
Kafka topic, an embedded-log stream's table). While the new stream is still
below a job's checkpoints, the ends show it (``base.check_not_rewound``); once
it has grown past them, offsets alone cannot tell it from the old one, and
the job would read on from its checkpoint, skipping the new stream's first
records without a word. Kafka's own consumers notice by the topic id
(KIP-516); so does this: each model keeps its inputs' ids (a key of the
model's configuration, written when the model is planned), the planner
refuses a new version over another stream, and the source compares the ids
as it plans batches (``runtime.source``). A model planned before ids were
kept has none, and is not checked. See docs/design.md, "A stream made again
under a job".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream
from pipelines.errors import InputRewoundError
from pipelines.systems.base import SupportsIdentity

IDENTITY_KEY = "pipelines.input.identities"
"""The key of a model's configuration that holds ``{"<system>.<stream>": "<id>"}``."""


def identities(system_of: Callable[[str], Any], streams: Iterable[SystemStream]) -> dict[str, str]:
    """The id of each stream whose system (``system_of(name)``) has one (``SupportsIdentity``), now."""
    result = {}
    for stream in sorted(set(streams), key=str):
        system = system_of(stream.system)
        if isinstance(system, SupportsIdentity):
            result[str(stream)] = system.identity(stream.stream)
    return result


def recorded(model: JobModel) -> dict[str, str]:
    """The ids ``model`` was planned over; empty for a model planned before they were kept (not checked)."""
    raw = model.config.get(IDENTITY_KEY)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str)}


def check_same_streams(job: str, version: int, recorded: Mapping[str, str], now: Mapping[str, str], then: str) -> None:
    """``InputRewoundError`` if a stream of the job is not the one its model was planned over."""
    for name in sorted(recorded):
        was, now_id = recorded[name], now.get(name)
        if now_id is not None and now_id != was:
            raise InputRewoundError(
                f"input {name} of job {job!r} is not the stream model v{version} was planned over: its id was "
                f"{was} and is {now_id} now, so it was deleted and created again under its name, and the job's "
                f"checkpoints name other records in it; {then}"
            )
