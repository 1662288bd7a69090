"""Backend ``local``: every node is one torchrun agent on this host, rendezvous on loopback."""

from __future__ import annotations

from chaos.backends.agents import HostAgents


class LocalBackend(HostAgents):
    """Runs ``spec.nodes`` torchrun agents as child processes of the runner, on loopback.

    The nodes share the host's network, so network faults cannot act here (use ``netns``)."""

    kind = "local"
