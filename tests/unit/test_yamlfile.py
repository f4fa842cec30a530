"""The strict YAML reader: what ``yaml.safe_load`` reads it reads the same, except a key written twice."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pipelines import yamlfile
from pipelines.yamlfile import DuplicateKeyError

KEYS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=8)
LEAVES = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
DOCUMENTS = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


@given(DOCUMENTS, st.booleans())
def test_every_document_without_duplicates_reads_as_safe_load_reads_it(document: Any, flow: bool) -> None:
    """A mapping dumped from a dict has unique keys: the strict reader must never refuse one, nor read it otherwise."""
    text = yaml.safe_dump(document, default_flow_style=flow)
    assert yamlfile.load(text) == yaml.safe_load(text) == document


@given(
    st.lists(st.from_regex(r"k[a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=6, unique=True),
    st.data(),
    st.integers(0, 3),
)
def test_a_key_repeated_at_any_depth_is_refused_with_both_lines(
    keys: list[str], data: st.DataObject, depth: int
) -> None:
    """One key of a block mapping written again further down, the mapping nested ``depth`` levels deep."""
    first = data.draw(st.integers(0, len(keys) - 1))
    again = data.draw(st.integers(first + 1, len(keys)))
    lines = [f"{key}: {i}" for i, key in enumerate(keys)]
    lines.insert(again, f"{keys[first]}: again")
    for level in range(depth):  # nest the whole mapping one level deeper, under a key of its own
        lines = [f"level{level}:"] + ["  " + line for line in lines]
    with pytest.raises(DuplicateKeyError) as info:
        yamlfile.load("\n".join(lines) + "\n")
    where = (info.value.key, info.value.first_line, info.value.line)
    assert where == (repr(keys[first]), depth + first + 1, depth + again + 1)


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("a: 1\nb: 2\na: 3\n", (1, 3)),
        ("1: x\n0x1: y\n", (1, 2)),  # one int key, however written: the dict would keep only the second
        ("- {k: 1, k: 2}\n", (1, 1)),
        ("outer:\n  - inner:\n      k: 1\n      j: 2\n      k: 3\n", (3, 5)),
        ("&k a: 1\nb: 2\n*k : 3\n", (1, 3)),  # an alias of the first key, found where the alias is written
    ],
)
def test_duplicates(text: str, lines: tuple[int, int]) -> None:
    with pytest.raises(DuplicateKeyError) as info:
        yamlfile.load(text)
    assert (info.value.first_line, info.value.line) == lines
    assert isinstance(info.value, yaml.MarkedYAMLError)  # reported as any other YAML error is


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('1: a\n"1": b\n', {1: "a", "1": "b"}),  # an int and a string: two keys
        ("base: &b {x: 1, y: 1}\nover: {<<: *b, x: 2}\n", {"base": {"x": 1, "y": 1}, "over": {"x": 2, "y": 1}}),
        ("a: &m {<<: {x: 1}, x: 2}\nb: {<<: *m}\n", {"a": {"x": 2}, "b": {"x": 2}}),  # a merged mapping merged again
    ],
)
def test_what_is_not_a_duplicate(text: str, expected: Any) -> None:
    assert yamlfile.load(text) == expected == yaml.safe_load(text)
