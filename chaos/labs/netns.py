"""Throwaway namespaces on a private bridge, for tests, benchmarks and capability probes.

``NetLab(token, names)`` makes one namespace per name (``chaos-t<token>-<name>``, interface ``eth0``,
``<subnet>.<i+1>/24``) plus a hub namespace ``chaos-t<token>-hub`` holding the bridge that joins them,
so the host's own network is never touched. :meth:`NetLab.stop` deletes them all (links go with their
namespaces) and is idempotent; :meth:`NetLab.leftovers` lists whatever of the token still exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.labs.base import NETNS_DIR, Lab
from chaos.net.delayer import find_delayers, stop_pid
from chaos.net.iptables import run_prefix
from chaos.net.node import NodeNet


@dataclass
class LabBackend:
    """Just enough of a backend for network faults: its kind and each node's real namespace."""

    nets: dict[int, NodeNet]
    kind: str = "netns"
    groups: None = None  # no torchft replica groups (chaos.backends.base.Backend.groups)

    @property
    def nodes(self) -> int:
        return len(self.nets)

    def node_net(self, node: int) -> NodeNet | None:
        return self.nets.get(node)


class NetLab(Lab):
    """Namespaces ``chaos-t<token>-<name>`` on one bridge; ``nets[i]`` is node i (``names[i]``).
    ``run_id`` is what faults acting here should name their chains after."""

    label = "netns lab"

    def __init__(self, token: str, names: tuple[str, ...] = ("a", "b"), subnet: str = "10.77.0") -> None:
        super().__init__(token)
        self.names = names
        self.subnet = subnet
        self.nets: list[NodeNet] = []

    @property
    def run_id(self) -> str:
        return f"test-{self.token}"

    def backend(self) -> LabBackend:
        return LabBackend({n.node: n for n in self.nets})

    def _make(self) -> None:
        """The hub namespace with bridge ``br0``, then each node's namespace, its veth ``v<name>`` a port of it."""
        hub = f"chaos-t{self.token}-hub"
        self._add_bridge("br0", hub=hub)
        for i, name in enumerate(self.names):
            ns = f"chaos-t{self.token}-{name}"
            self._add_namespace(ns, f"{self.subnet}.{i + 1}", f"v{name}", "br0", hub=hub)
            self.nets.append(NodeNet(i, name, f"{self.subnet}.{i + 1}", f"{NETNS_DIR}/{ns}", "eth0"))

    def _end(self) -> None:
        """Stop any delayer of this lab's run."""
        for pid in find_delayers(chain_prefix=run_prefix(self.run_id)):
            stop_pid(pid)

    def leftovers(self) -> list[str]:
        """What of the lab still exists: namespaces, links of the host, delayer processes."""
        return super().leftovers() + [f"delayer pid {p}" for p in find_delayers(chain_prefix=run_prefix(self.run_id))]
