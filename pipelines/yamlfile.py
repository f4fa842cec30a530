"""The one YAML reader for files users write (job configs, with their ``systems:`` and ``stores:`` sections).

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping, so a
config holding ``elasticity_factor: 1`` and, further down,
``elasticity_factor: 4`` runs at factor 4 with no word about the 1. YAML 1.2
says the keys of a mapping are unique, and Kubernetes and Airflow users
expect a repeated key to be refused, so ``StrictLoader`` refuses it, naming
the key and the lines of both. Everything else is ``SafeLoader``'s: the same
types, the same errors.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode

from pipelines.core.limits import shown

_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names one key twice; a ``yaml.MarkedYAMLError``, so callers that report YAML errors report it."""

    def __init__(self, key: str, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(
            context=f"first at line {first.line + 1}; the keys of a mapping must be unique",
            problem=f"duplicate key {key}",
            problem_mark=again,
        )
        self.key = key
        self.first_line = first.line + 1
        self.line = again.line + 1


class StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key written twice in one mapping, at any depth.

    The check is made as each mapping is composed, before any is built: the
    constructor rewrites mappings that use merge keys (``<<: *base``) in
    place, and a key a merge brings in may be overridden by one written in
    the mapping, as YAML's merge allows; only keys written side by side count.
    Keys are compared as the values they load as, as the dict they fill
    compares them: ``1`` and ``0x1`` are one key (the dict would keep one),
    ``1`` and ``"1"`` are two.
    """

    def compose_mapping_node(self, anchor: Any) -> MappingNode:  # the anchor's name or None (the stubs say a dict)
        node = super().compose_mapping_node(anchor)
        seen: dict[Any, ScalarNode] = {}  # each key's node where it was first written
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
                continue  # a mapping or list as a key is refused by the constructor ("unhashable key")
            try:
                key = self.construct_object(key_node)
                if key not in seen:
                    seen[key] = key_node
                    continue
            except (yaml.YAMLError, TypeError):
                continue  # a key that does not load (a bad !!timestamp) is refused by the constructor, as before
            first = seen[key]
            # an alias as a key (``*k: 2``) is the anchored key's own node, marked where the anchor is: its value
            # is written where the alias is
            again = value_node.start_mark if key_node is first else key_node.start_mark
            raise DuplicateKeyError(shown(key_node.value), first.start_mark, again)
        return node


def load(text: str) -> Any:
    """The one YAML document in ``text``, as ``yaml.safe_load`` reads it, refusing duplicate keys."""
    return yaml.load(text, Loader=StrictLoader)  # a SafeLoader: no arbitrary objects
