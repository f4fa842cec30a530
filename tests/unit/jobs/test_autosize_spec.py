"""The ``autosize:`` section as the job's model checks it: each bad value is refused with its field named."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pipelines.core.autosize import AutosizeConfig
from pipelines.errors import ConfigError
from pipelines.jobs.spec import AutosizeSpec, autosize_config


def test_an_absent_or_empty_section_is_the_defaults_and_a_config_reads_back_as_itself() -> None:
    config = AutosizeConfig()
    assert autosize_config(None) == autosize_config({}) == config
    assert autosize_config(config.to_dict()) == config
    assert isinstance(autosize_config({"cooldown_s": 60}).cooldown_s, float)
    assert set(AutosizeSpec.model_fields) == set(config.to_dict()), "the model and the core have one set of fields"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"min_factor": 0}, "autosize.min_factor"),
        ({"max_factor": 0}, "autosize.max_factor"),
        ({"min_factor": 4, "max_factor": 2}, "autosize.min_factor"),
        ({"min_factor": 1.5}, "autosize.min_factor"),
        ({"max_factor": True}, "autosize.max_factor"),
        ({"cooldown_s": -1}, "autosize.cooldown_s"),
        ({"cooldown_s": "5m"}, "autosize.cooldown_s"),
        ({"cooldown_s": math.inf}, "autosize.cooldown_s"),
        ({"small_lag_s": math.nan}, "autosize.small_lag_s"),
        ({"scale_up_busy": 1.5}, "autosize.scale_up_busy"),
        ({"scale_down_busy": -0.1}, "autosize.scale_down_busy"),
        ({"scale_down_busy": 0.8, "scale_up_busy": 0.7}, "autosize.scale_down_busy"),
        ({"scale_down_busy": 0.5, "scale_up_busy": 0.5}, "autosize.scale_down_busy"),
        ({"lag_growth_records_per_s": -1}, "autosize.lag_growth_records_per_s"),
        ({"small_lag_s": -5}, "autosize.small_lag_s"),
        ({"window_s": 0}, "autosize.window_s"),
        ({"min_batches": 1}, "autosize.min_batches"),
        ({"window_batches": 3, "min_batches": 5}, "autosize.window_batches"),
        ({"allowed": "primes"}, "autosize.allowed"),
        ({"policy": "no-colon"}, "autosize.policy"),
        ({"policy": "pkg.mod:"}, "autosize.policy"),
        ({"scale_up": 0.9}, "scale_up"),
    ],
)
def test_a_bad_value_is_refused_with_its_field_named(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field) as info:
        autosize_config(raw)
    assert "\n" not in str(info.value), "one line"


def test_the_section_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="'autosize' must be a mapping of autosize fields"):
        autosize_config([1, 2])
