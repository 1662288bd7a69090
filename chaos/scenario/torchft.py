"""``backend.replica_groups``: a torchft job, every node one replica group with a Lighthouse that
chaos starts, and ``lighthouse-partition``, the fault that cuts one group off from it.

torchft (pytorch/torchft) runs each replica group as its own torchrun job; the groups find each other
through a Lighthouse (``torchft_lighthouse``), which forms a quorum of the groups that heartbeat to
it. A group that fails is left out of the next quorum while the others train on; when it returns it
heals from a peer's live state. chaos launches the groups as separate torchrun jobs (one rendezvous
each) and gives each the variables torchft's examples read: ``REPLICA_GROUP_ID``,
``NUM_REPLICA_GROUPS`` and ``TORCHFT_LIGHTHOUSE``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from chaos.scenario.base import PathText, _Model
from chaos.scenario.trigger import _Healable


class LighthouseSpec(_Model):
    """The Lighthouse chaos starts for the run (``torchft_lighthouse`` on 127.0.0.1, a reserved port)."""

    min_replicas: int = Field(default=1, ge=1, description="--min_replicas: replica groups a quorum needs.")
    join_timeout_ms: int = Field(default=1000, ge=0, description="--join_timeout_ms: how long a quorum waits "
                                 "for heartbeating stragglers, ms.")
    heartbeat_timeout_ms: int = Field(default=5000, gt=0, description="--heartbeat_timeout_ms: silence after "
                                      "which a replica group is taken for dead, ms.")
    quorum_tick_ms: int = Field(default=100, gt=0, description="--quorum_tick_ms: how often a quorum is "
                                "looked for, ms.")
    binary: PathText = Field(default="torchft_lighthouse", description="The Lighthouse program: a path, or a name "
                        "looked up beside the target's interpreter, then on PATH (pip install torchft).")


class ReplicaGroupsSpec(_Model):
    """Run the job as torchft replica groups: node ``g`` is replica group ``g`` (its own torchrun and
    rendezvous, ``nproc_per_node`` ranks), all of them joined by a Lighthouse."""

    lighthouse: LighthouseSpec = Field(default_factory=LighthouseSpec)


class LighthousePartitionFault(_Healable):
    """Cut one replica group off from the Lighthouse: iptables drops what the group's processes send
    to the Lighthouse's port (its heartbeats and quorum requests; the replies then never come), while
    the group still reaches its peers. Backend ``local`` with ``replica_groups``; needs root and the
    cgroup v2 hierarchy (the rule matches the group's cgroup)."""

    fault: Literal["lighthouse-partition"]
    node: int = Field(ge=0, description="The replica group (node) cut off.")

    def describe(self) -> str:
        return f"cut replica group {self.node} off from the Lighthouse {self.trigger.describe()}{self._span()}"
