"""The one resolver of user code named ``package.module:name`` (process functions, extractors, policies)."""

from __future__ import annotations

import json

import pytest

from pipelines.core.dotted import is_dotted, resolve, resolve_callable
from pipelines.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "dotted"),
    [
        ("json:dumps", True),
        ("a.b.c:D", True),
        ("json", False),
        ("json:", False),
        (":dumps", False),
        ("js-on:dumps", False),
        ("json:du mps", False),
        (7, False),
        (None, False),
    ],
)
def test_the_form_is_checked_without_importing(value: object, dotted: bool) -> None:
    assert is_dotted(value) is dotted


def test_a_name_resolves_to_the_attribute_and_a_wrong_one_says_which_part_is_wrong() -> None:
    assert resolve_callable("json:dumps", "process function") is json.dumps
    assert resolve("json:decoder", "policy") is json.decoder
    with pytest.raises(ConfigError, match=r"^extractor 'json' must look like 'package.module:function'$"):
        resolve_callable("json", "extractor")
    with pytest.raises(ConfigError, match=r"^policy 'no_such_module_xyz:P': cannot import 'no_such_module_xyz'"):
        resolve("no_such_module_xyz:P", "policy")
    with pytest.raises(ConfigError, match=r"^policy 'json:Nope': json has no 'Nope'$"):
        resolve("json:Nope", "policy")
    with pytest.raises(ConfigError, match=r"^process function 'json:decoder': json has no callable 'decoder'$"):
        resolve_callable("json:decoder", "process function")
