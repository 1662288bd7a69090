"""The base of every scenario model: unknown fields are errors (a typo names the field), never
silently ignored settings; floats must be finite (``.inf`` and ``.nan`` are errors naming the field).
:func:`short` is how a user's value appears in a message: bounded, whatever its size."""

from __future__ import annotations

import reprlib

from pydantic import BaseModel, ConfigDict

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
