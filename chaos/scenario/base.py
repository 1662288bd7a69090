"""The base of every scenario model: unknown fields are errors (a typo names the field), never
silently ignored settings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)
