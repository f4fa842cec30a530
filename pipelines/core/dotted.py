"""User code a job's YAML names as ``package.module:name``: a process function, an extractor, a policy.

One resolver, so the three say a wrong name the same way: what is named, and
whether the module or the name in it is missing. Importing is the only effect.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

from pipelines.errors import ConfigError


def is_dotted(value: object) -> bool:
    """``value`` has the form ``package.module:name`` (no import is tried)."""
    if not isinstance(value, str):
        return False
    module, sep, attr = value.partition(":")
    return bool(sep) and all(p.isidentifier() for p in module.split(".")) and attr.isidentifier()


def resolve(path: str, what: str, form: str = "'package.module:name'", kind: str = "") -> object:
    """Import ``path``'s module and return its attribute; a ConfigError naming ``what`` when it cannot."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what} {path!r} must look like {form}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{what} {path!r}: cannot import {module_name!r}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{what} {path!r}: {module_name} has no {kind}{attr!r}") from None


def resolve_callable(path: str, what: str, form: str = "'package.module:function'") -> Callable[..., Any]:
    """``resolve``, for a name that must be a function (or any callable)."""
    fn = resolve(path, what, form, kind="callable ")
    if not callable(fn):
        module_name, _, attr = path.partition(":")
        raise ConfigError(f"{what} {path!r}: {module_name} has no callable {attr!r}")
    return cast(Callable[..., Any], fn)
