"""``lighthouse-partition``: cut one torchft replica group off from the Lighthouse.

The groups of a ``local`` run share the host's network (loopback), so the cut cannot be made by
address. Each group's agent runs in its own cgroup (v2, ``chaos-<token>-g<node>``, see
:mod:`chaos.backends.replica_groups`); a chain in the host's filter table, jumped to from OUTPUT,
drops the TCP packets that processes of that cgroup send to the Lighthouse's port
(``-o lo -p tcp --dport <port> -m cgroup --path <cgroup> -j DROP``). The group's heartbeats and quorum
requests stop reaching the Lighthouse, which drops the group from the next quorum after
``heartbeat_timeout_ms``; the group's traffic to its peers (the process group, the heal) flows. The
heal removes the chain.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from chaos.backends.replica_groups import require_cgroup
from chaos.cgroup2 import cgroup_status
from chaos.errors import CapabilityError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.net.iptables import chain_name, install_chain, remove_chain
from chaos.net.netns import Netns
from chaos.scenario import LighthousePartitionFault

HOST_NS = "/proc/self/ns/net"


def lighthouse_rules(port: int, cgroup: str) -> list[list[str]]:
    """The rules that drop what processes of ``cgroup`` (a path relative to the cgroup v2 root) send
    to TCP ``port`` on loopback."""
    return [["-o", "lo", "-p", "tcp", "--dport", str(port), "-m", "cgroup", "--path", cgroup, "-j", "DROP"]]


def group_preflight(env: FaultEnv, node: int, fault: str, doing: str) -> None:
    """What a fault on one torchft replica group (``lighthouse-partition``, a ``delay`` of a group) needs:
    raise :class:`~chaos.errors.CapabilityError` if the run has no replica groups, replica group ``node``
    does not exist, cgroup v2 cannot be written, or iptables is not installed. ``fault`` names the fault
    in the messages about the run, ``doing`` in those about this machine."""
    if env.backend.groups is None:
        raise CapabilityError("replica groups", f"{fault}: the backend runs no torchft replica groups; "
                              "set backend.replica_groups (backend kind local)")
    nodes = env.backend.nodes
    if node >= nodes:
        raise CapabilityError("node", f"{fault}: replica group {node} does not exist "
                              f"(the backend has {nodes}: 0..{nodes - 1})")
    ok, why = cgroup_status()
    if not ok:
        raise CapabilityError("cgroup v2", f"{doing}: {why}")
    if shutil.which("iptables") is None:
        raise CapabilityError("iptables", f"{doing}: `iptables` is not installed (apt-get install iptables)")


class LighthousePartition(SpecFault):
    """Drop replica group ``node``'s traffic to the Lighthouse until healed (see the module doc)."""

    instant = False

    def __init__(self, spec: LighthousePartitionFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: LighthousePartitionFault = spec
        self._installed = False

    def ranks(self, env: FaultEnv) -> set[int] | None:
        ranks = set(env.workers.ranks_of_node(self.spec.node))
        return ranks or None

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` if the run has no replica groups, the group
        does not exist, cgroup v2 cannot be written, or iptables is missing (:func:`group_preflight`)."""
        group_preflight(env, self.spec.node, "lighthouse-partition", "lighthouse-partition")

    def ready(self, env: FaultEnv) -> bool:
        groups = env.backend.groups
        return groups is not None and bool(groups.port) and groups.cgroup_path(self.spec.node) is not None

    def _chain(self, env: FaultEnv) -> str:
        return chain_name(env.run_id, self.id)

    def _ids(self, env: FaultEnv) -> dict[str, Any]:
        return {"netns": "host", "netns_inode": os.stat(HOST_NS).st_ino, "table": "filter",
                "chain": self._chain(env)}

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        groups = env.backend.groups
        cgroup = require_cgroup(groups, self.spec.node, "lighthouse-partition")
        assert groups is not None  # require_cgroup raised otherwise
        chain = self._chain(env)
        env.manifest.add("chain", **self._ids(env))  # written down before it is made
        self._installed = True
        install_chain(Netns(HOST_NS), chain, lighthouse_rules(groups.port, cgroup), ("OUTPUT",))
        return {"mechanism": "iptables -m cgroup", "chain": chain, "node": self.spec.node, "cgroup": cgroup,
                "lighthouse_port": groups.port}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Remove the chain and its jump. Idempotent."""
        chain = self._chain(env)
        if shutil.which("iptables") is None:
            return None
        removed = remove_chain(Netns(HOST_NS), chain, ("OUTPUT",))
        if self._installed:
            env.manifest.release("chain", **self._ids(env))
            self._installed = False
        return {"mechanism": "iptables -m cgroup", "chain": chain, "node": self.spec.node} if removed else None


__all__ = ["LighthousePartition", "group_preflight", "lighthouse_rules"]
