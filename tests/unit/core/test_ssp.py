"""Names of input systems: the one list the CLI, the job YAML and the registry check against."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.ssp import SYSTEMS, validate_system
from pipelines.errors import ConfigError


@given(st.text(max_size=300))
def test_only_the_known_systems_pass_and_a_refusal_is_one_short_line(name: str) -> None:
    if name in SYSTEMS:
        assert validate_system(name) == name
        return
    with pytest.raises(ConfigError) as info:
        validate_system(name)
    message = str(info.value)
    assert message.startswith("unknown input system ") and message.endswith("choose one of deltalog, kafka, kinesis")
    assert "\n" not in message and len(message) < 200  # a 300-character name is cut, as every quoted value is


def test_the_registry_opens_every_system_the_list_names() -> None:
    """``SYSTEMS`` lives apart from the registry so the CLI can check a name before the systems load: keep the two
    in step, as the job YAML's schema takes its choices from the same list."""
    from pipelines.jobs.spec import SYSTEMS as job_systems
    from pipelines.systems.registry import position_order

    assert job_systems is SYSTEMS
    for system in SYSTEMS:
        assert callable(position_order(system))
