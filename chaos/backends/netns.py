"""Backend ``netns``: every node is a Linux network namespace with its own address on a bridge.

For users with root but no Docker. Node ``i`` of a run lives in namespace ``chaos-<tok>-n<i>``
(``/run/netns/…``), reached through a veth pair whose host end (``chv<tok>n<i>``) is a port of the
run's bridge ``chb-<tok>``; inside, the node's interface is ``eth0`` with ``10.213.X.(10+i)/24``. Its
torchrun agent is a process of this host started in that namespace (``nsenter --net``), so pids, the
run directory and the interpreter are the host's. Links and namespaces are made over netlink
(pyroute2). Where the host filters bridged traffic (``bridge-nf-call-iptables=1``, as after Docker
starts, with a FORWARD policy of DROP), an ACCEPT rule for the bridge goes into our own chain.
Every name is built by :mod:`chaos.backends.names` (where ``chaos cleanup`` parses it back).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from pathlib import Path
from typing import Any

from chaos.backends.agents import HostAgents
from chaos.backends.names import bridge_name, forward_chain, netns_name, run_token, veth_name
from chaos.errors import CapabilityError, ChaosError
from chaos.history import RunnerLog
from chaos.net.iptables import install_chain, remove_chain
from chaos.net.netns import Netns
from chaos.net.node import NodeNet
from chaos.reserve import Reservation, reserve
from chaos.scenario import NetnsBackendSpec

NETNS_DIR = Path("/run/netns")
FIRST_HOST = 10  # node i has .(10 + i)


def pick_subnet(spec_subnet: str) -> ipaddress.IPv4Network:
    """The subnet a scenario names (``backend.subnet``), checked to have room for the nodes."""
    net = ipaddress.IPv4Network(spec_subnet, strict=False)
    if net.prefixlen > 26:
        raise ChaosError(f"backend.subnet={spec_subnet} is too small; use a /24")
    return net


def reserve_subnet() -> Reservation[ipaddress.IPv4Network]:
    """The first /24 of 10.213.0.0/16 that no address of this host is in and no other run holds,
    reserved machine-wide (:mod:`chaos.reserve`) until released.

    A run's addresses exist only inside its namespaces, so no look at the host can see which /24s
    other runs use, and two runs choosing at the same moment would pick the same one: the
    reservation is what keeps them apart. (Two bridges could carry one subnet, but the host's
    conntrack, which sees bridged packets when ``bridge-nf-call-iptables=1``, and anyone reading the
    journals or a capture would mix the two runs up.) Raises :class:`~chaos.errors.ChaosError` if
    none is left."""
    used = _host_networks()
    pool = (ipaddress.IPv4Network(f"10.213.{k}.0/24") for k in range(1, 251))
    try:
        return reserve("subnets", pool, lambda net: not any(net.overlaps(u) for u in used))
    except ChaosError as exc:
        raise ChaosError(f"netns: no free /24 in 10.213.0.0/16 ({exc}); set backend.subnet") from exc


def _host_networks() -> list[ipaddress.IPv4Network]:
    from pyroute2 import IPRoute

    out = []
    with IPRoute() as ipr:
        for msg in ipr.get_addr(family=2):
            out.append(ipaddress.IPv4Network(f"{msg.get_attr('IFA_ADDRESS')}/{msg['prefixlen']}", strict=False))
    return out


class NetnsBackend(HostAgents):
    """Nodes in network namespaces on a bridge. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)."""

    kind = "netns"

    def __init__(self, spec: NetnsBackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        super().__init__(spec, run_id, run_dir, log)
        self.token = run_token(run_id)
        self.bridge = bridge_name(self.token)
        self.fwd_chain = forward_chain(self.token)
        self.subnet: ipaddress.IPv4Network | None = None
        self._subnet_spec = spec.subnet
        self._subnet_lock: Reservation[ipaddress.IPv4Network] | None = None  # held until destroy
        self._made: list[str] = []  # namespaces created

    # -- names and addresses -----------------------------------------------------------------------
    def ns_name(self, node: int) -> str:
        return netns_name(self.token, node)

    def veth(self, node: int) -> str:
        return veth_name(self.token, node)

    def ip(self, node: int) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + FIRST_HOST + node)

    def endpoint_host(self) -> str:
        return self.ip(self.spec.rdzv_node)

    def local_addr(self, node: int) -> str | None:
        return self.ip(node)

    def iface(self, node: int) -> str | None:
        return "eth0"

    def wrap(self, node: int, cmd: list[str]) -> list[str]:
        return ["nsenter", f"--net={NETNS_DIR / self.ns_name(node)}", *cmd]

    def node_net(self, node: int) -> NodeNet | None:
        if self.subnet is None or self.ns_name(node) not in self._made:
            return None
        return NodeNet(node, self.ns_name(node), self.ip(node), str(NETNS_DIR / self.ns_name(node)), "eth0")

    # -- lifecycle ----------------------------------------------------------------------------------
    def preflight(self, script: str | None = None) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` naming the fix without root, nsenter, ip or pyroute2."""
        from chaos.capabilities import CAPABILITIES

        why = CAPABILITIES["netns"]()
        if why:
            raise CapabilityError("netns", why)

    def setup(self) -> None:
        from pyroute2 import IPRoute, NetNS, netns

        if self._subnet_spec:
            self.subnet = pick_subnet(self._subnet_spec)
        else:
            self._subnet_lock = reserve_subnet()
            self.subnet = self._subnet_lock.value
            self.manifest.add("reservation", pool="subnets", value=str(self.subnet))
        made = {"bridge": self.bridge, "namespaces": [self.ns_name(n) for n in range(self.nodes)],
                "subnet": str(self.subnet)}
        self.log.record("netns_setup", **made)  # before creating, so a crashed run's leftovers are known
        with IPRoute() as ipr:
            self.manifest.add("bridge", name=self.bridge)
            ipr.link("add", ifname=self.bridge, kind="bridge")
            br = ipr.link_lookup(ifname=self.bridge)[0]
            ipr.link("set", index=br, state="up")
            for node in range(self.nodes):
                name = self.ns_name(node)
                self.manifest.add("netns", name=name)
                netns.create(name)
                self._made.append(name)
                self.manifest.add("veth", name=self.veth(node))
                ipr.link("add", ifname=self.veth(node), kind="veth", peer={"ifname": "eth0", "net_ns_fd": name})
                v = ipr.link_lookup(ifname=self.veth(node))[0]
                ipr.link("set", index=v, master=br, state="up")
                with NetNS(name) as ns:
                    idx = ns.link_lookup(ifname="eth0")[0]
                    ns.addr("add", index=idx, address=self.ip(node), prefixlen=self.subnet.prefixlen)
                    ns.link("set", index=idx, state="up")
                    ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
        self._allow_forward()

    def _allow_forward(self) -> None:
        """ACCEPT the bridge's traffic in our own FORWARD chain if the host filters bridged packets."""
        try:
            filtered = Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
        except OSError:
            filtered = False
        if not filtered or shutil.which("iptables") is None:
            return
        rules = [["-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]]
        self.manifest.add("chain", **self._fwd_ids())
        install_chain(_host_netns(), self.fwd_chain, rules, hooks=("FORWARD",))
        self.log.record("netns_forward_rule", chain=self.fwd_chain, bridge=self.bridge)

    def destroy(self) -> None:
        """Remove the namespaces (their veth pairs go with them), the bridge and our FORWARD chain.
        Idempotent; never raises."""
        removed: dict[str, Any] = {"namespaces": []}
        try:
            from pyroute2 import IPRoute, netns
        except ImportError:
            return
        for node in range(self.nodes):
            name = self.ns_name(node)
            if (NETNS_DIR / name).exists():
                try:
                    netns.remove(name)
                    removed["namespaces"].append(name)
                except Exception as exc:  # keep removing the rest
                    self.log.record("netns_teardown_failed", what=name, error=str(exc))
        with IPRoute() as ipr:
            for ifname in [self.bridge, *(self.veth(n) for n in range(self.nodes))]:
                found = ipr.link_lookup(ifname=ifname)
                if found:
                    try:
                        ipr.link("del", index=found[0])
                        removed.setdefault("links", []).append(ifname)
                    except Exception as exc:
                        self.log.record("netns_teardown_failed", what=ifname, error=str(exc))
        if shutil.which("iptables"):
            try:
                if remove_chain(_host_netns(), self.fwd_chain, hooks=("FORWARD",)):
                    removed["chain"] = self.fwd_chain
                if self.subnet is not None:
                    self.manifest.release("chain", **self._fwd_ids())
            except ChaosError as exc:
                self.log.record("netns_teardown_failed", what=self.fwd_chain, error=str(exc))
        self._made.clear()
        if self.subnet is not None:  # set up (at least in part): release in the manifest what is gone
            self._release_gone()
        if self._subnet_lock is not None:  # the namespaces are gone: another run may have the subnet
            self._subnet_lock.release()
            self.manifest.release("reservation", pool="subnets", value=str(self.subnet))
        if removed["namespaces"] or removed.get("links") or removed.get("chain"):
            self.log.record("netns_teardown", **removed)

    def _fwd_ids(self) -> dict[str, Any]:
        """The FORWARD chain as the manifest names it: in the host's namespace (by inode)."""
        return {"netns": "host", "netns_inode": os.stat(_host_netns().path).st_ino, "table": "filter",
                "chain": self.fwd_chain}

    def _release_gone(self) -> None:
        """Release, in the manifest, the namespaces, bridge and veths that no longer exist."""
        from pyroute2 import IPRoute

        for node in range(self.nodes):
            if not (NETNS_DIR / self.ns_name(node)).exists():
                self.manifest.release("netns", name=self.ns_name(node))
        with IPRoute() as ipr:
            for name, kind in [(self.bridge, "bridge"), *((self.veth(n), "veth") for n in range(self.nodes))]:
                if not ipr.link_lookup(ifname=name):
                    self.manifest.release(kind, name=name)


def _host_netns() -> Netns:
    """The runner's own network namespace (where the bridge and its FORWARD rule live)."""
    return Netns(f"/proc/{os.getpid()}/ns/net")
