"""Backend ``local``: every node is one torchrun agent on this host, rendezvous and gloo on loopback.

What torch still opens on every interface (its TCPStore server binds the wildcard address and has
no option to bind another): the c10d rendezvous store in the agent that hosts it, and the workers'
store (``MASTER_PORT``) that rank 0 or its agent hosts. ``tests/security/test_loopback.py`` lists them."""

from __future__ import annotations

from chaos.backends.agents import HostAgents


class LocalBackend(HostAgents):
    """Runs ``spec.nodes`` torchrun agents as child processes of the runner, on loopback.

    The nodes share the host's network, so network faults cannot act here (use ``netns``)."""

    kind = "local"

    def local_addr(self, node: int) -> str | None:
        """``127.0.0.1``: torchrun tells the workers this as ``MASTER_ADDR`` (not the hostname, which
        may resolve to an address on the network)."""
        return "127.0.0.1"

    def iface(self, node: int) -> str | None:
        """``lo``: gloo listens and connects on loopback only (``GLOO_SOCKET_IFNAME``), never on the
        interface the hostname resolves to."""
        return "lo"
