"""Backend ``local``: every node is one torchrun agent on this host; the rendezvous store, the workers'
store and gloo listen on loopback only (``tests/security/test_loopback.py``). torch's TCPStore server binds
the wildcard address whatever host it is given, so chaos hands both stores a socket bound to 127.0.0.1
(:mod:`chaos.loopback`, through the ``sitecustomize`` of :mod:`chaos.loopback_site`)."""

from __future__ import annotations

import os

from chaos.backends.agents import HostAgents
from chaos.paths import package_root


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

    def node_env(self, node: int, env: dict[str, str]) -> dict[str, str]:
        """:mod:`chaos.loopback_site` first on ``PYTHONPATH``: every worker's stores listen on loopback only,
        whatever interpreter runs it (its own ``sitecustomize``, if any, still runs)."""
        site = str(package_root() / "loopback_site")
        return {"PYTHONPATH": os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)}
