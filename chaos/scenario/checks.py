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
# a torchft job's defaults (backend.replica_groups): a returning group heals from a peer, not from disk,
# and a fault-free reference is not the oracle (the survivors train on with fewer groups' gradients)
REPLICA_GROUP_DEFAULT_CHECKS = ["completes", "groups_kept_stepping", "healed_from_peer", "quorum_changes",
                                "replicas_agree"]
# a black-box target's defaults: what can be judged from outside the job
BLACKBOX_DEFAULT_CHECKS = ["completes", "restored_from_checkpoint", "progress_lost", "recovery_time",
                           "checkpoint_loadable"]
