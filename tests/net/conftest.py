"""Fixtures that build real network namespaces for the network-fault tests.

Each test gets three nodes ``chaos-t<hex>-a|b|c`` (``eth0``, 10.77.0.1-3/24) whose veth peers are
ports of a bridge inside a fourth namespace ``chaos-t<hex>-hub``, so nothing is added to the host's
own network. Teardown stops any delayer of the test's run, deletes the namespaces (their links go
with them) and asserts nothing of the test is left, whether the test passed or not.

Needs root: skipped without it, except under ``CI=true``, where a missing privilege is a failure.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from chaos.backends.base import NodeNet
from chaos.faults.base import FaultEnv
from chaos.net.delayer import find_delayers, stop_pid
from chaos.net.iptables import run_prefix
from chaos.workers import WorkerTable

NODE_NAMES = ("a", "b", "c")
SUBNET = "10.77.0"
TOOLS = ("ip", "tc", "iptables", "nsenter", "unshare")


def require_root() -> None:
    """Skip (fail under CI=true) unless this process is root and has the tools."""
    why = None
    if os.geteuid() != 0:
        why = "network namespace tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    else:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing:
            why = f"network namespace tests need {', '.join(missing)}"
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: not skipped)")
    pytest.skip(why)


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=10)


@dataclass
class FakeBackend:
    """Just enough of a backend for network faults: the kind and each node's real namespace."""

    nets: dict[int, NodeNet]
    kind: str = "netns"

    @property
    def nodes(self) -> int:
        return len(self.nets)

    def node_net(self, node: int) -> NodeNet | None:
        return self.nets.get(node)


@dataclass
class Lab:
    """Three test namespaces on one bridge, and a fault environment over them."""

    token: str
    nets: list[NodeNet]
    namespaces: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return f"test-{self.token}"

    def env(self) -> FaultEnv:
        return FaultEnv(FakeBackend({n.node: n for n in self.nets}), WorkerTable(), self.run_id)  # type: ignore[arg-type]


def _build(lab: Lab) -> None:
    hub = f"chaos-t{lab.token}-hub"
    sh("ip", "netns", "add", hub)
    lab.namespaces.append(hub)
    sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", hub, "link", "set", "br0", "up")
    for i, name in enumerate(NODE_NAMES):
        ns = f"chaos-t{lab.token}-{name}"
        sh("ip", "netns", "add", ns)
        lab.namespaces.append(ns)
        sh("ip", "-n", hub, "link", "add", f"v{name}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", hub, "link", "set", f"v{name}", "master", "br0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        lab.nets.append(NodeNet(i, name, f"{SUBNET}.{i + 1}", f"/run/netns/{ns}", "eth0"))


def leftovers(token: str) -> list[str]:
    """Whatever of the test ``token`` still exists: namespaces, host links, delayers."""
    out = [f"netns {n}" for n in os.listdir("/run/netns") if token in n] if os.path.isdir("/run/netns") else []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines() if token in ln]
    out += [f"delayer pid {p}" for p in find_delayers() if _ours(p, token)]
    return out


def _ours(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return run_prefix(f"test-{token}").encode() in fh.read()
    except OSError:
        return False


@pytest.fixture
def lab() -> Iterator[Lab]:
    require_root()
    lab = Lab(secrets.token_hex(3), [])
    try:
        _build(lab)
        yield lab
    finally:
        for pid in find_delayers():
            if _ours(pid, lab.token):
                stop_pid(pid)
        for ns in reversed(lab.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        deadline = time.monotonic() + 5
        while leftovers(lab.token) and time.monotonic() < deadline:  # veth teardown is asynchronous
            time.sleep(0.05)
        left = leftovers(lab.token)
        assert not left, f"left behind: {left}"
