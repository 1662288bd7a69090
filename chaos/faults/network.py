"""Network faults: ``delay``, ``loss``, ``bandwidth`` and ``partition`` of a node's traffic.

Each acts inside the node's network namespace (``Backend.node_net``), on what the node *sends*
(egress of its interface); a partition drops both directions. Mechanisms:

  delay      ``netem`` root qdisc where the kernel has ``sch_netem``, else the NFQUEUE delayer
             (:mod:`chaos.net.delayer`; IPv4 only, packets this node's stack sends)
  loss       ``netem loss`` where the kernel has it, else ``iptables -m statistic … -j DROP`` on
             arrival in the other nodes (INPUT, by the lossy node's address)
  bandwidth  ``tbf`` root qdisc
  partition  ``iptables`` DROP by the other side's addresses, INPUT and OUTPUT, in every node

What each installs is named after the run and fault (``CHAOS-<run hash>-<fault id>`` chains, a
qdisc handle derived from both), so ``heal`` (idempotent, also before ``inject`` and after a crash
of the runner) removes exactly that and nothing of anyone else's. One qdisc fault (netem or tbf)
per node at a time: ``inject`` refuses a node whose root qdisc is already configured.
"""

from __future__ import annotations

import shutil
from typing import Any

from chaos.errors import CapabilityError, ChaosError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.faults.delayer_run import RunDelayer, stop_strays
from chaos.net import tc
from chaos.net.iptables import (
    chain_name,
    inbound_loss_rules,
    install_chain,
    iptables_status,
    partition_rules,
    remove_chain,
)
from chaos.net.netns import can_enter_namespaces
from chaos.net.node import NodeNet
from chaos.scenario import BandwidthFault, DelayFault, LossFault, PartitionFault

NetworkSpec = DelayFault | LossFault | BandwidthFault | PartitionFault


def mechanism_for(spec: NetworkSpec) -> str:
    """The mechanism a network fault uses on this machine: ``netem``, ``nfqueue`` (the delayer),
    ``iptables`` or ``tbf``. An explicit ``mechanism:`` is returned as asked (preflight rejects
    ``netem`` on a kernel without it). Raises ValueError for a spec that is not a network fault."""
    if isinstance(spec, DelayFault):
        if spec.mechanism != "auto":
            return spec.mechanism
        return "netem" if tc.netem_available() else "nfqueue"
    if isinstance(spec, LossFault):
        if spec.mechanism != "auto":
            return spec.mechanism
        return "netem" if tc.netem_available() else "iptables"
    if isinstance(spec, BandwidthFault):
        return "tbf"
    if isinstance(spec, PartitionFault):
        return "iptables"
    raise ValueError(f"not a network fault: {spec!r}")


def _needs(mechanism: str) -> tuple[str, str] | None:
    """(missing capability, message) if ``mechanism`` cannot work on this machine, else None."""
    if mechanism in ("netem", "tbf") and shutil.which("tc") is None:
        return "tc", "network faults need `tc` (apt-get install iproute2)"
    if mechanism == "netem" and not tc.netem_available():
        return "sch_netem", f"mechanism: netem is not available: {tc.netem_status()[1]}"
    if mechanism in ("iptables", "nfqueue"):
        ok, why = iptables_status()
        if not ok:
            return "iptables", f"{why}; apt-get install iptables"
    if mechanism == "nfqueue":
        import importlib.util

        if importlib.util.find_spec("netfilterqueue") is None:
            return "netfilterqueue", ("the NFQUEUE delayer needs the NetfilterQueue package (apt-get install "
                                      "libnetfilter-queue-dev; pip install NetfilterQueue), or a kernel with sch_netem")
    return None


class _NetworkFault(SpecFault):
    """Shared parts: the node(s) acted on, their namespaces as seen at inject, preflight."""

    instant = False

    def __init__(self, spec: Any, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self._nets: dict[int, NodeNet] = {}  # node → where inject acted

    def describe(self) -> str:
        text: str = self.spec.describe()
        return text

    def nodes(self) -> list[int]:
        return [self.spec.node]

    @property
    def mechanism(self) -> str:
        return mechanism_for(self.spec)

    def ranks(self, env: FaultEnv) -> set[int] | None:
        ranks = {r for node in self.nodes() for r in env.workers.ranks_of_node(node)}
        return ranks or None

    def ready(self, env: FaultEnv) -> bool:
        return all(env.backend.node_net(n) is not None for n in self.nodes())

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` if the backend shares the host's network
        (``local``), a node is out of range, this process cannot enter namespaces, or the mechanism
        is missing (``mechanism: netem`` without sch_netem names the ``auto`` fallback)."""
        kind = env.backend.kind
        if kind == "local":
            raise CapabilityError("network namespace", f"{self.spec.fault}: network faults need the netns or docker "
                                  "backend (the local backend's nodes share the host's network); use backend: "
                                  "{kind: netns} or {kind: docker}")
        nodes = env.backend.nodes
        bad = [n for n in self.nodes() if n >= nodes]
        if bad:
            raise CapabilityError("node", f"{self.spec.fault}: node {bad[0]} does not exist (the backend has "
                                  f"{nodes} nodes: 0..{nodes - 1})")
        why = can_enter_namespaces()
        if why:
            raise CapabilityError("root", f"{self.spec.fault}: {why}")
        need = _needs(self.mechanism)
        if need:
            missing, message = need
            if missing == "sch_netem":
                fallback = "the NFQUEUE delayer" if self.spec.fault == "delay" else "iptables -m statistic"
                message += f"; use mechanism: auto ({fallback} where netem is missing)"
            raise CapabilityError(missing, f"{self.spec.fault}: {message}")

    def _net(self, env: FaultEnv, node: int) -> NodeNet:
        net = env.backend.node_net(node)
        if net is None:
            raise ChaosError(f"{self.spec.fault}: node {node} has no network namespace (not started, or the local "
                             "backend)")
        return net

    def _heal_net(self, env: FaultEnv, node: int) -> NodeNet | None:
        """Where to heal ``node``: where inject acted if that namespace still exists, else the
        node's current namespace; None if there is none (nothing left to undo there)."""
        net = self._nets.get(node)
        if net is not None and net.netns().exists():
            return net
        try:
            current = env.backend.node_net(node)
        except ChaosError:
            return None
        return current if current is not None and current.netns().exists() else None

    def _chain(self, env: FaultEnv) -> str:
        return chain_name(env.run_id, self.id)

    def _handle(self, env: FaultEnv) -> str:
        return tc.qdisc_handle(f"{env.run_id}/{self.id}")


def _record_chain(env: FaultEnv, net: NodeNet, chain: str) -> None:
    """Write down, before it is made, the chain a fault installs in ``net``'s namespace."""
    env.manifest.add("chain", netns=net.netns_path, table="filter", chain=chain)


def _release_chain(env: FaultEnv, net: NodeNet | None, chain: str) -> None:
    if net is not None:
        env.manifest.release("chain", netns=net.netns_path, table="filter", chain=chain)


def _where(net: NodeNet) -> dict[str, Any]:
    return {"node": net.node, "netns": net.netns_path, "iface": net.iface, "ip": net.ip}


class _QdiscFault(_NetworkFault):
    """A fault that is a root qdisc on the node's interface (netem or tbf)."""

    def _set_qdisc(self, env: FaultEnv, net: NodeNet, setter: Any) -> dict[str, Any]:
        ns = net.netns()
        kind, handle = tc.root_qdisc_handle(ns, net.iface)
        if not tc.is_default(handle) and handle != self._handle(env):
            raise ChaosError(f"{self.spec.fault}: node {net.node} ({net.iface}) already has a root qdisc {kind} "
                             f"{handle} (another qdisc fault acting, or one left by a crashed run: chaos cleanup); "
                             "one netem/tbf fault per node at a time")
        self._nets[net.node] = net
        env.manifest.add("qdisc", netns=net.netns_path, dev=net.iface, handle=self._handle(env))
        cmd = setter(ns)
        return {"qdisc": " ".join(cmd[cmd.index("root"):]), "previous_qdisc": kind}

    def _heal_qdisc(self, env: FaultEnv, mechanism: str) -> dict[str, Any] | None:
        net = self._heal_net(env, self.spec.node)
        removed = net is not None and tc.clear_root_qdisc(net.netns(), net.iface, self._handle(env))
        for n in {x.netns_path: x for x in (self._nets.get(self.spec.node), net) if x is not None}.values():
            env.manifest.release("qdisc", netns=n.netns_path, dev=n.iface, handle=self._handle(env))  # or gone with it
        if not removed or net is None:
            return None
        return {"mechanism": mechanism, **_where(net), "removed_qdisc": self._handle(env)}


class Delay(_QdiscFault):
    """Delay every packet ``spec.node`` sends by ``delay_ms`` ± ``jitter_ms`` ms: netem, or the
    NFQUEUE delayer (a process in the node's namespace that this runner owns) without netem. In a run
    of torchft replica groups (local backend) a ``delay`` is a :class:`~chaos.faults.group_delay.GroupDelay`
    instead (:func:`chaos.faults.fault_class`)."""

    def __init__(self, spec: DelayFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: DelayFault = spec
        self._delayer = RunDelayer()

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        s = self.spec
        net = self._net(env, s.node)
        mech = self.mechanism
        if mech == "netem":
            done = self._set_qdisc(env, net, lambda ns: tc.set_netem(
                ns, net.iface, s.delay_ms, s.jitter_ms, s.correlation_pct, handle=self._handle(env)))
            return {"mechanism": mech, **_where(net), **done, "delay_ms": s.delay_ms, "jitter_ms": s.jitter_ms}
        self._nets[net.node] = net
        _record_chain(env, net, self._chain(env))
        started = self._delayer.start(env, net.netns(), net.iface, self._chain(env), s, net.node)
        return {"mechanism": mech, **_where(net), **started, "delay_ms": s.delay_ms, "jitter_ms": s.jitter_ms}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Remove the netem qdisc, or the NFQUEUE chain and then the delayer (this object's, or one
        a crashed runner left, found by its chain name). Idempotent."""
        if self.mechanism == "netem":
            return self._heal_qdisc(env, "netem")
        done = self._delayer.stop(env)
        chain = self._chain(env)
        net = self._heal_net(env, self.spec.node)
        if net is not None and remove_chain(net.netns(), chain):
            done["chain"] = chain
        _release_chain(env, self._nets.get(self.spec.node) or net, chain)
        done.update(stop_strays(chain))
        if not done:
            return None
        return {"mechanism": "nfqueue", **(_where(net) if net else {"node": self.spec.node}), **done}


class Loss(_QdiscFault):
    """Drop ``percent`` percent of the packets ``spec.node`` sends, at random: netem loss, or
    without netem, an iptables chain (``-m statistic --mode random``) on INPUT in every other node,
    matching the lossy node's address — a drop on arrival, which TCP sees as real loss."""

    def __init__(self, spec: LossFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: LossFault = spec

    def _receivers(self, env: FaultEnv) -> list[int]:
        return [n for n in range(env.backend.nodes) if n != self.spec.node]

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        net = self._net(env, self.spec.node)
        mech = self.mechanism
        if mech == "netem":
            done = self._set_qdisc(env, net, lambda ns: tc.set_netem(
                ns, net.iface, loss_pct=self.spec.percent, handle=self._handle(env)))
            return {"mechanism": mech, **_where(net), **done, "percent": self.spec.percent}
        self._nets[net.node] = net
        chain = self._chain(env)
        receivers = [self._net(env, n) for n in self._receivers(env)]
        try:
            for peer in receivers:
                self._nets[peer.node] = peer
                _record_chain(env, peer, chain)
                install_chain(peer.netns(), chain, inbound_loss_rules(self.spec.percent, net.ip), ("INPUT",))
        except ChaosError:
            self.heal(env)
            raise
        return {"mechanism": mech, **_where(net), "chain": chain, "percent": self.spec.percent,
                "dropped_at": [p.node for p in receivers]}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Remove the netem qdisc or the chains. Idempotent."""
        if self.mechanism == "netem":
            return self._heal_qdisc(env, "netem")
        chain = self._chain(env)
        healed = []
        for node in self._receivers(env):
            peer = self._heal_net(env, node)
            if peer is not None and remove_chain(peer.netns(), chain):
                healed.append(node)
            _release_chain(env, self._nets.get(node) or peer, chain)
        if not healed:
            return None
        return {"mechanism": "iptables", "node": self.spec.node, "chain": chain, "nodes": healed}


class Bandwidth(_QdiscFault):
    """Cap what ``spec.node`` sends at ``rate_kbit`` kbit/s with a token bucket (tbf) of
    ``burst_bytes`` bytes holding packets at most ``latency_ms`` ms."""

    def __init__(self, spec: BandwidthFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: BandwidthFault = spec

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        s = self.spec
        net = self._net(env, s.node)
        done = self._set_qdisc(env, net, lambda ns: tc.set_tbf(
            ns, net.iface, s.rate_kbit, s.burst_bytes, s.latency_ms, handle=self._handle(env)))
        return {"mechanism": "tbf", **_where(net), **done, "rate_kbit": s.rate_kbit}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Remove the tbf qdisc (only ours). Idempotent."""
        return self._heal_qdisc(env, "tbf")


class Partition(_NetworkFault):
    """Cut the nodes of ``between[0]`` off from those of ``between[1]``: in every node of both
    sides, a chain jumped to from INPUT and OUTPUT drops packets from and to the other side's
    addresses. Traffic within a side, and to anything else, flows."""

    def __init__(self, spec: PartitionFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: PartitionFault = spec

    def nodes(self) -> list[int]:
        return [*self.spec.between[0], *self.spec.between[1]]

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        sides = [[self._net(env, n) for n in side] for side in self.spec.between]
        chain = self._chain(env)
        self._nets.update({net.node: net for side in sides for net in side})
        try:
            for k, side in enumerate(sides):
                peers = [p.ip for p in sides[1 - k]]
                for net in side:
                    _record_chain(env, net, chain)
                    install_chain(net.netns(), chain, partition_rules(peers), ("INPUT", "OUTPUT"))
        except ChaosError:
            self.heal(env)
            raise
        return {"mechanism": "iptables", "chain": chain, "between": self.spec.between,
                "nodes": {str(n.node): n.ip for side in sides for n in side}}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Remove the chain from every node of both sides where it is. Idempotent."""
        chain = self._chain(env)
        healed = []
        errors = []
        for node in self.nodes():
            net = self._heal_net(env, node)
            if net is None:
                _release_chain(env, self._nets.get(node), chain)  # gone with its namespace
                continue
            try:
                if remove_chain(net.netns(), chain):
                    healed.append(node)
                _release_chain(env, self._nets.get(node) or net, chain)
            except ChaosError as exc:  # heal the other nodes anyway, then report
                errors.append(str(exc))
        if errors:
            raise ChaosError(f"partition heal: {'; '.join(errors)}")
        return {"mechanism": "iptables", "chain": chain, "nodes": healed} if healed else None


__all__ = ["Bandwidth", "Delay", "Loss", "Partition", "mechanism_for"]
