"""The job YAML's ``systems: deltalog:`` section: how long a read waits for storage that went away.

Apart from the ``deltalog`` package so that checking a job's configuration does not
load ``deltalake``, and so that opening the embedded log without settings
(every Spark worker of a job on it) does not load pydantic.
"""

from __future__ import annotations

from typing import Annotated, TypedDict

from pydantic import Field

from pipelines.settings import Number, Section


class DeltaLogOptions(TypedDict, total=False):
    """What the section sets of ``DeltaLog``'s keywords (nothing it leaves out)."""

    read_timeout_s: float


class DeltaLogSettings(Section):
    """The embedded log needs no server, so its only setting is about its storage."""

    read_timeout_s: Annotated[float, Number(0.0, 86_400.0)] = Field(
        30.0, description="seconds a read in flight waits for the stream's storage to come back before it fails"
    )
