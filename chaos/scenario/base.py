"""The base of every scenario model: unknown fields are errors (a typo names the field), never
silently ignored settings; floats must be finite (``.inf`` and ``.nan`` are errors naming the field).
:func:`short` is how a user's value appears in a message: bounded, whatever its size. :data:`PathText` is
every path field: one that cannot name a file on this system at all is an error naming the field.
:func:`field_value` reads one field of raw scenario data as the model does (its default, its constraints),
for the rules that read fields of several sections (:mod:`chaos.load.rules`), and :func:`dict_or_empty` a
section of raw data whose shape the model has not checked yet."""

from __future__ import annotations

import functools
import reprlib
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, TypeAdapter, ValidationError

from chaos.paths import path_problem

SHORT_CHARS = 200  # longest repr of a user's value in a message
At = Callable[[tuple[Any, ...]], str]  # a field's location in the scenario → its problem's "line N: " prefix, or ""

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 3, 8, 8, 8, 8
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = SHORT_CHARS, SHORT_CHARS, 60


def short(value: object, limit: int = SHORT_CHARS) -> str:
    """``repr(value)`` in at most ``limit`` characters (about; nested containers elided with ``...``),
    in time bounded by ``limit``, not by the size of ``value``."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


def _path_text(value: str) -> str:
    problem = path_problem(value) if value else None  # empty: the field's own min_length says so
    if problem:
        raise ValueError(f"{short(value, 80)} {problem}; give a shorter path")
    return value


PathText = Annotated[str, AfterValidator(_path_text)]  # a path field (chaos.paths.path_problem)


def dict_or_empty(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict (a mapping section of raw scenario data, as YAML gives it), else ``{}``: so a
    rule can read a section's keys before the model has said what is wrong with its shape."""
    return value if isinstance(value, dict) else {}


def field_default(model: type[BaseModel], name: str) -> Any:
    """The default of field ``name`` of ``model`` (a default factory called). Raises KeyError for a
    name that is not one of its fields."""
    return model.model_fields[name].get_default(call_default_factory=True)


def field_value(model: type[BaseModel], data: Any, name: str, invalid: Any = None) -> Any:
    """Field ``name`` of ``model`` as the model reads it from ``data``, one section of raw scenario data
    (a mapping, as YAML gives it): the value converted and checked by the field's type and constraints
    (not by the model's validator methods), :func:`field_default` when ``data`` has no such key or is no
    mapping, ``invalid`` when the value is not one the field takes (the model's validation names it).
    For fields of plain types (numbers, strings, literals, lists of them); raises KeyError for a name
    that is not one of ``model``'s fields."""
    if not isinstance(data, dict) or name not in data:
        return field_default(model, name)
    try:
        return _field_adapter(model, name).validate_python(data[name])
    except ValidationError:
        return invalid


@functools.cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    info = model.model_fields[name]
    form: Any = Annotated[info.annotation, info]  # the field's type with its constraints, as a type of its own
    return TypeAdapter(form, config=ConfigDict(allow_inf_nan=model.model_config.get("allow_inf_nan", True)))
