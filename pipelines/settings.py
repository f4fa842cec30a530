"""The pieces every settings model is built from (pydantic 2): strict sections, checked values, one-line errors.

A job's YAML, its ``stores:`` and each input system's ``systems:`` settings
are pydantic models made of these pieces, so the rules are declared once and
the same declaration publishes the JSON schema (``docs/job-schema.json``):

* ``Section``, the base of every model: not a mapping, or a key it does not
  have, is refused, a misspelled key with the did-you-mean hint
  (``pipelines.errors.unknown_fields``). Nothing unknown is ever ignored.
* value checks, used as ``Annotated[int, Whole(1)]`` (``Whole``, ``Number``,
  ``Flag``, ``Text``, ``OneOf``, ``Said``, ``AnyMapping``): each checks
  strictly (``"2"`` is not a whole number, ``1`` is not true) and says what
  it wants in words and in its JSON schema.
* ``check``: validation, and pydantic's ``ValidationError`` turned into the
  one ``ConfigError`` line the CLI prints (``error: ...``, exit 2). The first
  problem is reported, named by its path in the YAML, with the field's
  description and the value given::

      job.yaml: 'batch.max_records' must be a whole number >= 1 (records per micro-batch ...), got 0
      job.yaml: batch: unknown field(s) 'max_record' (did you mean 'max_records'?); the fields are ...
      job.yaml: inputs[1]: missing required field 'stream' (the stream's name in its system)
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from pipelines.errors import ConfigError, did_you_mean, unknown_fields

VALUE = "value"
"""A value is wrong: ``'path' <message> (<description>), got <value>``."""
SECTION = "section"
"""A section is wrong as a whole (unknown keys, two fields that exclude each other): ``path: <message>``."""
SENTENCE = "sentence"
"""A message that names its field itself (``job name 'x' is invalid``): ``<parent path>: <message>``."""
VERBATIM = "verbatim"
"""A message complete as it is (a system still validating by hand names its own path)."""


def value_error(message: str, hint: str = "") -> PydanticCustomError:
    """``message`` says what the value must be; ``hint`` follows the value given (the did-you-mean hint)."""
    return PydanticCustomError(VALUE, message, {"hint": hint} if hint else None)


def section_error(message: str) -> PydanticCustomError:
    return PydanticCustomError(SECTION, message)


def sentence_error(message: str) -> PydanticCustomError:
    return PydanticCustomError(SENTENCE, message)


def verbatim_error(message: str) -> PydanticCustomError:
    return PydanticCustomError(VERBATIM, message)


def _nullable(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """A section that takes ``null`` as empty says so in its JSON schema."""
    if issubclass(model, Section) and model.NONE_IS_EMPTY:
        schema["type"] = ["object", "null"]


class Section(BaseModel):
    """A mapping of known keys: anything else is refused with the key it was probably meant to be."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_nullable)

    NONE_IS_EMPTY: ClassVar[bool] = True
    """``batch:`` with nothing after it is the empty section, as YAML users write it."""
    MAPPING_OF: ClassVar[str] = "settings"

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if data is None and cls.NONE_IS_EMPTY:
            return {}
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise value_error(f"must be a mapping of {cls.MAPPING_OF}")
        fields = cls.model_fields
        for key in data:
            if key not in fields and (reason := cls.refuse(str(key))) is not None:
                raise section_error(reason)
        message = unknown_fields(data, fields)
        if message is not None:
            raise section_error(message)
        return data

    @classmethod
    def refuse(cls, key: str) -> str | None:
        """A section's own reason to refuse an unknown ``key`` (Kinesis: credentials), before the hint."""
        return None


# ------------------------------------------------------------------ value types


class Check:
    """``Annotated`` metadata that validates with ``check`` and publishes ``schema()``: ``Annotated[int, Whole(1)]``.

    Pydantic's own coercions are not used: each check is strict and its
    message says what the value must be, which is what a user fixing a YAML
    file needs.
    """

    def check(self, value: Any) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(self.check)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return self.schema()


def _between(minimum: float | None, maximum: float | None, above: bool = False) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum:g} to {maximum:g}"
    if minimum is not None:
        return f"{'>' if above else '>='} {minimum:g}"
    return f"<= {maximum:g}" if maximum is not None else ""


@dataclass(frozen=True)
class Whole(Check):
    """A whole number (not a bool, not a float, not a string of digits) in ``[minimum, maximum]``."""

    minimum: int = 1
    maximum: int | None = None

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            raise value_error(f"must be a whole number {_between(self.minimum, self.maximum)}")
        if self.maximum is not None and value > self.maximum:
            raise value_error(f"must be a whole number {_between(self.minimum, self.maximum)}")
        return value

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer", "minimum": self.minimum}
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema


@dataclass(frozen=True)
class Number(Check):
    """A finite number (a whole one is fine, a bool is not) ``>= minimum`` (``> minimum`` when ``above``), as a
    float."""

    minimum: float = 0.0
    maximum: float | None = None
    above: bool = False

    def check(self, value: Any) -> float:
        wrong = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
        if not wrong:
            low = value <= self.minimum if self.above else value < self.minimum
            wrong = low or (self.maximum is not None and value > self.maximum)
        if wrong:
            raise value_error(f"must be a number {_between(self.minimum, self.maximum, self.above)}")
        return float(value)

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "number", ("exclusiveMinimum" if self.above else "minimum"): self.minimum}
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema


@dataclass(frozen=True)
class Flag(Check):
    """true or false, nothing that merely looks like one (``"yes"``, ``1``)."""

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise value_error("must be true or false")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Text(Check):
    """A non-empty string, stripped."""

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise value_error("must be a non-empty string")
        return value.strip()

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "minLength": 1}


@dataclass(frozen=True)
class OneOf(Check):
    """One of ``values``; a near miss is named in the hint."""

    values: tuple[str, ...]

    def __init__(self, *values: str) -> None:
        object.__setattr__(self, "values", values)

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or value not in self.values:
            raise value_error(f"must be one of {', '.join(self.values)}", did_you_mean(value, self.values))
        return value

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


@dataclass(frozen=True, eq=False)
class Said(Check):
    """A value checked by a function of the pure core that raises ``ConfigError`` naming the field itself."""

    function: Callable[[Any], Any]
    json: dict[str, Any] = field(default_factory=dict)

    def check(self, value: Any) -> Any:
        try:
            return self.function(value)
        except ConfigError as error:
            raise sentence_error(str(error)) from None

    def schema(self) -> dict[str, Any]:
        return dict(self.json)


@dataclass(frozen=True)
class AnyMapping(Check):
    """A free-form mapping its consumer checks (``process_options``); absent or empty (``null``) is ``{}``."""

    def check(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise value_error("must be a mapping")
        return dict(value)

    def schema(self) -> dict[str, Any]:
        return {"type": ["object", "null"]}


PositiveWhole = Annotated[int, Whole(1)]
PositiveNumber = Annotated[float, Number(0.0, above=True)]
StrictBool = Annotated[bool, Flag()]
NonEmptyText = Annotated[str, Text()]


# ------------------------------------------------------------------ validation and its one-line message


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def check(kind: Any, raw: Any, where: str, at: tuple[str | int, ...] = ()) -> Any:
    """``raw`` validated as ``kind`` (a ``Section`` or any type made of them), or one ``ConfigError`` line.

    ``where`` names the file or section the value came from; ``at`` is the
    path of ``raw`` inside it (``("stores",)``), for the message.
    """
    try:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind.model_validate(raw)
        return _adapter(kind).validate_python(raw)
    except ValidationError as error:
        raise ConfigError(f"{where}: {explain(error, kind, at)}") from None


def explain(error: ValidationError, kind: Any, at: tuple[str | int, ...] = ()) -> str:
    """The first problem of ``error`` in words (see the module docstring for the forms)."""
    first = error.errors(include_url=False)[0]
    raw_loc = first["loc"]
    key = "[key]" in raw_loc
    inner = tuple(p for p in raw_loc if p != "[key]")
    loc = (*at, *inner)
    kind_of = first["type"]
    text = first["msg"]
    if kind_of == VERBATIM:
        return text
    if kind_of == SECTION:
        return _under(loc, text)
    if kind_of == SENTENCE or key:
        return _under(loc[:-1], text)
    if kind_of == "missing":
        about = _description(kind, inner)
        return _under(loc[:-1], f"missing required field {loc[-1]!r}" + (f" ({about})" if about else ""))
    wanted = text if kind_of == VALUE else _PHRASES.get(kind_of, text[:1].lower() + text[1:])
    about = _description(kind, inner)
    hint = str((first.get("ctx") or {}).get("hint", ""))
    subject = f"{_path(loc)!r} " if loc else ""
    return f"{subject}{wanted}{f' ({about})' if about else ''}, got {_shown(first.get('input'))}{hint}"


_PHRASES = {
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "bool_type": "must be true or false",
    "float_type": "must be a number",
    "too_short": "must not be empty",
    "extra_forbidden": "is not a known field",
}


def _path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _under(loc: tuple[Any, ...], message: str) -> str:
    return f"{_path(loc)}: {message}" if loc else message


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _description(kind: Any, loc: tuple[Any, ...]) -> str | None:
    """The ``description`` of the field at ``loc`` inside ``kind``, found by walking the types along the path."""
    info = None
    for part in loc:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(part))
            if field is None:
                return None
            info, kind = field, field.annotation
        elif get_origin(kind) in (dict, Mapping):
            info, kind = None, get_args(kind)[1]
        elif get_origin(kind) in (list, tuple):
            info, kind = None, get_args(kind)[0]
        else:
            return None
    return info.description if info is not None else None


def _unwrap(kind: Any) -> Any:
    """The model or container inside ``Annotated[...]`` and ``X | None``."""
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind = get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            rest = [a for a in get_args(kind) if a is not type(None)]
            if len(rest) != 1:
                return kind
            kind = rest[0]
        else:
            return kind
