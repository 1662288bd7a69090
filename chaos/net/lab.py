"""Throwaway namespaces on a private bridge, for tests, benchmarks and capability probes.

``NetLab(token, names)`` makes one namespace per name (``chaos-t<token>-<name>``, interface ``eth0``,
``<subnet>.<i+1>/24``) plus a hub namespace holding the bridge that joins them, so the host's own
network is never touched. :meth:`NetLab.destroy` deletes them all (links go with their namespaces)
and is idempotent; :func:`leftovers` lists whatever of a token still exists.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field

from chaos.errors import ChaosError
from chaos.net.delayer import find_delayers, stop_pid
from chaos.net.iptables import run_prefix
from chaos.net.node import NodeNet

NETNS_DIR = "/run/netns"


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise ChaosError(f"`ip {' '.join(args)}` exited {proc.returncode}: {proc.stderr.strip()}")


@dataclass
class LabBackend:
    """Just enough of a backend for network faults: its kind and each node's real namespace."""

    nets: dict[int, NodeNet]
    kind: str = "netns"

    @property
    def nodes(self) -> int:
        return len(self.nets)

    def node_net(self, node: int) -> NodeNet | None:
        return self.nets.get(node)


@dataclass
class NetLab:
    """Namespaces ``chaos-t<token>-<name>`` on one bridge; ``nets[i]`` is node i (``names[i]``).
    ``run_id`` is what faults acting here should name their chains after."""

    token: str
    names: tuple[str, ...] = ("a", "b")
    subnet: str = "10.77.0"
    nets: list[NodeNet] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return f"test-{self.token}"

    def backend(self) -> LabBackend:
        return LabBackend({n.node: n for n in self.nets})

    def build(self) -> NetLab:
        """Create the namespaces, bridge and veth pairs. Raises :class:`~chaos.errors.ChaosError`
        if ``ip`` fails (what was made is removed again)."""
        try:
            hub = f"chaos-t{self.token}-hub"
            _ip("netns", "add", hub)
            self.namespaces.append(hub)
            _ip("-n", hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", hub, "link", "set", "br0", "up")
            for i, name in enumerate(self.names):
                ns = f"chaos-t{self.token}-{name}"
                _ip("netns", "add", ns)
                self.namespaces.append(ns)
                _ip("-n", hub, "link", "add", f"v{name}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("-n", hub, "link", "set", f"v{name}", "master", "br0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{self.subnet}.{i + 1}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                self.nets.append(NodeNet(i, name, f"{self.subnet}.{i + 1}", f"{NETNS_DIR}/{ns}", "eth0"))
        except ChaosError:
            self.destroy()
            raise
        return self

    def destroy(self, wait_s: float = 5.0) -> list[str]:
        """Stop any delayer of this lab's run, delete the namespaces, and wait up to ``wait_s`` s
        for them to vanish. Idempotent; returns :func:`leftovers` (empty when all is gone)."""
        for pid in find_delayers(chain_prefix=run_prefix(self.run_id)):
            stop_pid(pid)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        self.namespaces.clear()
        deadline = time.monotonic() + wait_s
        while leftovers(self.token) and time.monotonic() < deadline:  # veth teardown is asynchronous
            time.sleep(0.05)
        return leftovers(self.token)


def leftovers(token: str) -> list[str]:
    """What of lab ``token`` still exists: namespaces, links of the host, delayer processes."""
    out = [f"netns {n}" for n in os.listdir(NETNS_DIR) if f"chaos-t{token}-" in n] if os.path.isdir(NETNS_DIR) else []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10).stdout
    out += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines() if token in ln]
    out += [f"delayer pid {p}" for p in find_delayers(chain_prefix=run_prefix(f"test-{token}"))]
    return out
