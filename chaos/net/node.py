"""A node's network as faults and the lab see it: which namespace to enter, which interface, which address."""

from __future__ import annotations

from dataclasses import dataclass, field

from chaos.net.netns import Netns, RemoteHost


@dataclass(frozen=True)
class NodeNet:
    """Where a node's network lives, for network faults.

    ``netns_path`` is what ``nsenter --net=<path>`` enters (``/run/netns/<name>`` for the netns
    backend, ``/proc/<pid>/ns/net`` of the container's init for docker, ``ssh://<address>`` for an
    ``ssh`` host, with ``remote`` set); ``iface`` is the node's
    interface on the run's network (its qdisc is what ``tc`` changes); ``ip`` its address there.
    """

    node: int
    name: str
    ip: str
    netns_path: str
    iface: str
    remote: RemoteHost | None = field(default=None, compare=False)  # set: the node is a remote host (its daemon)

    def netns(self) -> Netns:
        """The namespace network faults act in (a remote host's, through its daemon)."""
        return Netns(self.netns_path, self.remote)
