"""``checks:``, the checks that judge a run (:class:`CheckSpec`), and the default lists."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from chaos.scenario.base import _Model


class CheckSpec(_Model):
    """A check to run and its parameters (e.g. ``recovery_time: {max_s: 60}``)."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)


DEFAULT_CHECKS = ["completes", "restored_from_checkpoint", "equivalent_to_reference", "progress_lost", "recovery_time"]
# a black-box target's defaults: what can be judged from outside the job
BLACKBOX_DEFAULT_CHECKS = ["completes", "restored_from_checkpoint", "progress_lost", "recovery_time",
                           "checkpoint_loadable"]
