"""The base of every scenario model: unknown fields are errors (a typo names the field), never
silently ignored settings; floats must be finite (``.inf`` and ``.nan`` are errors naming the field).
:func:`short` is how a user's value appears in a message: bounded, whatever its size. :data:`PathText` is
every path field: one that cannot name a file on this system at all is an error naming the field."""

from __future__ import annotations

import reprlib
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from chaos.paths import path_problem

SHORT_CHARS = 200  # longest repr of a user's value in a message

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
