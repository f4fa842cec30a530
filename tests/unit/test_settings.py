"""The shared pieces of every settings model: strict values, unknown keys with the hint, one line per refusal."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field

from pipelines.errors import ConfigError
from pipelines.settings import Number, OneOf, PositiveWhole, Section, StrictBool, check


class Inner(Section):
    NONE_IS_EMPTY = False

    size: PositiveWhole = Field(description="how many")


class Outer(Section):
    """A section with every kind of field the models use."""

    count: PositiveWhole = Field(1, description="a count")
    ratio: Annotated[float, Number(0.0, 1.0)] = 0.5
    above: Annotated[float, Number(0.0, above=True)] = 1.0
    mode: Annotated[str, OneOf("fast", "safe")] = "safe"
    flag: StrictBool = False
    items: list[Inner] = Field(default_factory=list)
    named: dict[str, Inner] = Field(default_factory=dict)


def refusal(raw: Any) -> str:
    with pytest.raises(ConfigError) as error:
        check(Outer, raw, "x.yaml")
    return str(error.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"count": True}, "x.yaml: 'count' must be a whole number >= 1 (a count), got True"),
        ({"count": 2.0}, "x.yaml: 'count' must be a whole number >= 1 (a count), got 2.0"),
        ({"count": "2"}, "x.yaml: 'count' must be a whole number >= 1 (a count), got '2'"),
        ({"ratio": 1.5}, "x.yaml: 'ratio' must be a number from 0 to 1, got 1.5"),
        ({"above": 0}, "x.yaml: 'above' must be a number > 0, got 0"),
        ({"mode": "fsat"}, "x.yaml: 'mode' must be one of fast, safe, got 'fsat' (did you mean 'fast'?)"),
        ({"flag": 1}, "x.yaml: 'flag' must be true or false, got 1"),
        ({"cuont": 1}, "x.yaml: unknown field(s) 'cuont' (did you mean 'count'?); the fields are above, count, "),
        ({"items": [{"size": 1}, {}]}, "x.yaml: items[1]: missing required field 'size' (how many)"),
        (
            {"items": [{"size": 1}, {"size": 0}]},
            "x.yaml: 'items[1].size' must be a whole number >= 1 (how many), got 0",
        ),
        ({"named": {"a": {"siez": 1}}}, "x.yaml: named.a: unknown field(s) 'siez' (did you mean 'size'?)"),
        ({"items": "no"}, "x.yaml: 'items' must be a list, got 'no'"),
        ([1], "x.yaml: must be a mapping of settings, got [1]"),
    ],
)
def test_each_refusal_is_one_line_naming_the_field_what_it_must_be_and_what_was_given(raw: Any, message: str) -> None:
    text = refusal(raw)
    assert text.startswith(message), text
    assert "\n" not in text


def test_a_long_or_multi_line_value_stays_on_one_line() -> None:
    text = refusal({"mode": "line one\nline two " * 40})
    assert "\n" not in text and len(text) < 300


def test_what_passes_is_typed_and_none_is_an_empty_section() -> None:
    got = check(Outer, {"count": 3, "ratio": 1, "items": [{"size": 2}]}, "x.yaml")
    assert (got.count, got.ratio, got.items[0].size) == (3, 1.0, 2) and isinstance(got.ratio, float)
    assert check(Outer, None, "x.yaml") == Outer()
