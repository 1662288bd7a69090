"""``delay`` of one torchft replica group: what its processes send, held for ``delay_ms`` ± ``jitter_ms``.

The groups of a ``local`` run share the host's loopback, so a group cannot be told apart by address;
each group's agent runs in its own cgroup (v2, ``chaos-<token>-g<node>``, see
:mod:`chaos.backends.replica_groups`). A chain in the host's filter table, jumped to from OUTPUT, hands
what processes of that cgroup send on loopback to the NFQUEUE delayer (:mod:`chaos.net.delayer`, run
by this runner in the host's namespace): ``-o lo -m cgroup --path <cgroup> -j NFQUEUE``. Every packet
the group sends (to its peers' process group, to the Lighthouse, within the group) arrives late, as
from a host behind a slow link; what the other groups send is untouched. The heal removes the chain,
then stops the delayer. ``netem`` cannot be used here (a root qdisc on ``lo`` would delay every group).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from chaos.backends.replica_groups import require_cgroup
from chaos.errors import CapabilityError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.faults.delayer_run import RunDelayer, stop_strays
from chaos.faults.lighthouse import HOST_NS, group_preflight
from chaos.net.iptables import chain_name, iptables_status, remove_chain
from chaos.net.netns import Netns
from chaos.scenario import DelayFault


class GroupDelay(SpecFault):
    """The ``delay`` of replica group ``spec.node`` (see the module doc): what a ``delay`` fault is in a run
    of torchft replica groups (the kinds row's ``group_impl``, :func:`chaos.faults.fault_class`); elsewhere
    it is a :class:`chaos.faults.network.Delay`."""

    instant = False

    def __init__(self, spec: DelayFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: DelayFault = spec
        self._delayer = RunDelayer()
        self._chain_recorded = False

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return set(env.workers.ranks_of_node(self.spec.node)) or None

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` if ``mechanism: netem`` was asked for, the group
        does not exist, or cgroup v2, iptables (:func:`~chaos.faults.lighthouse.group_preflight`; its
        NFQUEUE rules) or the NetfilterQueue package is missing."""
        if self.spec.mechanism == "netem":
            raise CapabilityError("sch_netem", "delay: mechanism: netem cannot delay one replica group (the groups "
                                  "share loopback, and a qdisc on lo delays them all); use mechanism: auto (the "
                                  "NFQUEUE delayer on the group's cgroup)")
        group_preflight(env, self.spec.node, "delay", "delay of a replica group")
        ok, why = iptables_status()
        if not ok:
            raise CapabilityError("iptables", f"delay of a replica group: {why}; apt-get install iptables")
        import importlib.util

        if importlib.util.find_spec("netfilterqueue") is None:
            raise CapabilityError("netfilterqueue", "delay of a replica group needs the NetfilterQueue package "
                                  "(apt-get install libnetfilter-queue-dev; pip install NetfilterQueue)")

    def ready(self, env: FaultEnv) -> bool:
        groups = env.backend.groups
        return groups is not None and groups.cgroup_path(self.spec.node) is not None

    def _chain(self, env: FaultEnv) -> str:
        return chain_name(env.run_id, self.id)

    def _ids(self, env: FaultEnv) -> dict[str, Any]:
        return {"netns": "host", "netns_inode": os.stat(HOST_NS).st_ino, "table": "filter", "chain": self._chain(env)}

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        """Start the delayer and install the chain. Raises :class:`~chaos.errors.ChaosError` if the group
        has no cgroup, or the delayer cannot start (nothing is left then)."""
        s = self.spec
        cgroup = require_cgroup(env.backend.groups, s.node, "delay")
        chain = self._chain(env)
        env.manifest.add("chain", **self._ids(env))  # written down before it is made
        self._chain_recorded = True
        started = self._delayer.start(env, Netns(HOST_NS), "lo", chain, s, s.node, cgroup=cgroup)
        return {"mechanism": "nfqueue -m cgroup", "node": s.node, "cgroup": cgroup, **started,
                "delay_ms": s.delay_ms, "jitter_ms": s.jitter_ms}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Remove the chain, then stop the delayer (this object's, or one a crashed runner left, found by
        its chain's name). Idempotent: None when nothing was left."""
        done = self._delayer.stop(env)
        chain = self._chain(env)
        if shutil.which("iptables") is not None and remove_chain(Netns(HOST_NS), chain, ("OUTPUT",)):
            done["chain"] = chain
        if self._chain_recorded:
            env.manifest.release("chain", **self._ids(env))
            self._chain_recorded = False
        done.update(stop_strays(chain))
        return {"mechanism": "nfqueue -m cgroup", "node": self.spec.node, **done} if done else None


__all__ = ["GroupDelay"]
