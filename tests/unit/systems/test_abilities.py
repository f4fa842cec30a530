"""Which optional abilities each input system has: planning and the checks decide by them (``isinstance``).

A rename of ``KinesisSystem.relayout`` would make ``isinstance(system,
SupportsRelayout)`` false, and the planner would then treat Kinesis slots as
Kafka partitions (refusing a reshard that shrinks them, migrating checkpoints
bucket by bucket). Checked on the classes, so no server is needed.
"""

from __future__ import annotations

import pytest

from pipelines.systems.base import (
    ABILITIES,
    SupportsCommitted,
    SupportsIdentity,
    SupportsLineage,
    SupportsRecordsRead,
    SupportsRelayout,
    SupportsStartAtTime,
)
from pipelines.systems.deltalog import DeltaLog
from pipelines.systems.kafka import KafkaSystem
from pipelines.systems.kinesis import KinesisSystem

DECLARED: dict[type, set[type]] = {
    KinesisSystem: {SupportsRelayout, SupportsRecordsRead, SupportsLineage, SupportsStartAtTime},
    KafkaSystem: {SupportsCommitted, SupportsStartAtTime, SupportsIdentity},
    DeltaLog: {SupportsStartAtTime, SupportsIdentity},
}


def test_the_kinesis_system_is_slotted() -> None:
    assert issubclass(KinesisSystem, SupportsRelayout)
    assert isinstance(KinesisSystem({"region": "us-east-1"}), SupportsRelayout)


@pytest.mark.parametrize("system", list(DECLARED), ids=lambda c: c.__name__)
def test_each_system_has_exactly_its_declared_abilities(system: type) -> None:
    assert {a for a in ABILITIES if issubclass(system, a)} == DECLARED[system]


def test_an_object_missing_the_method_is_not_the_ability() -> None:
    class Renamed:
        def re_layout(self, stream: str, positions: dict[int, str], partitions: int) -> dict[int, str]:
            return dict(positions)

    assert not isinstance(Renamed(), SupportsRelayout)
