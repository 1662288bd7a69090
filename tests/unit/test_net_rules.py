"""Pure parts of the network faults: chain names, iptables rules, netem options, delay draws, and
the fault classes' choices (mechanism, preflight, the netem path) with a recorded, fake ``tc``."""

from __future__ import annotations

import statistics
import subprocess
from typing import Any

import pytest

from chaos.errors import CapabilityError, ChaosError
from chaos.faults import fault_class, network
from chaos.faults.base import FaultEnv
from chaos.faults.network import Bandwidth, Delay, Loss, Partition, mechanism_for
from chaos.net import iptables, tc
from chaos.net.delayer import DelayDraw
from chaos.net.iptables import chain_name, loss_rules, nfqueue_rules, partition_rules
from chaos.net.netns import Netns
from chaos.net.node import NodeNet
from chaos.scenario import BandwidthFault, DelayFault, LossFault, PartitionFault
from chaos.worker_table import WorkerTable
from tests.conftest import hosts_here

TRIGGER = {"at_time_s": 1}


def test_chain_names_are_ours_short_and_stable() -> None:
    name = chain_name("digits-20261129-214139-ab12cd", "f3")
    assert name.startswith("CHAOS-") and name.endswith("-f3") and len(name) <= 28
    assert name == chain_name("digits-20261129-214139-ab12cd", "f3")
    assert name != chain_name("digits-20261129-214139-ab12cd", "f4") != chain_name("other", "f3")
    long = chain_name("run", "a-very-long-fault-identifier-indeed")
    assert len(long) <= 28 and long.startswith(iptables.run_prefix("run"))
    assert chain_name("run", "f/1 x") != chain_name("run", "f/1 y")
    assert " " not in chain_name("run", "f/1 x")


NOT_DELAYED = ["-m", "mark", "!", "--mark", hex(iptables.DELAYER_MARK)]


def test_loss_rules() -> None:
    assert loss_rules(10, "eth0") == [["-o", "eth0", *NOT_DELAYED, "-m", "statistic", "--mode", "random",
                                       "--probability", "0.1", "-j", "DROP"]]
    assert loss_rules(0.5)[0][-4:-2] == ["--probability", "0.005"]
    assert loss_rules(100, "eth0") == [["-o", "eth0", *NOT_DELAYED, "-j", "DROP"]]
    for bad in (0, -1, 101):
        with pytest.raises(ChaosError):
            loss_rules(bad, "eth0")


def test_partition_rules_cut_both_directions() -> None:
    assert partition_rules(["10.0.0.2", "10.0.0.3"]) == [
        ["-s", "10.0.0.2", "-j", "DROP"], ["-d", "10.0.0.2", "-j", "DROP"],
        ["-s", "10.0.0.3", "-j", "DROP"], ["-d", "10.0.0.3", "-j", "DROP"]]
    with pytest.raises(ChaosError):
        partition_rules([])


def test_nfqueue_rules_bypass_when_nobody_listens() -> None:
    assert nfqueue_rules(7, "eth0") == [["-o", "eth0", *NOT_DELAYED, "-j", "NFQUEUE", "--queue-num", "7",
                                         "--queue-bypass"]]
    with pytest.raises(ChaosError):
        nfqueue_rules(70000, "eth0")


def test_nfqueue_rules_of_one_cgroup_on_loopback() -> None:
    assert nfqueue_rules(7, "lo", "chaos-ab12-g1") == [["-o", "lo", *NOT_DELAYED, "-m", "cgroup", "--path",
                                                       "chaos-ab12-g1", "-j", "NFQUEUE", "--queue-num", "7",
                                                       "--queue-bypass"]]


def test_netem_args() -> None:
    assert tc.netem_args(delay_ms=50) == ["delay", "50000us"]
    assert tc.netem_args(delay_ms=50, jitter_ms=5, correlation_pct=25) == ["delay", "50000us", "5000us", "25%"]
    assert tc.netem_args(loss_pct=2.5) == ["loss", "2.5%"]
    with pytest.raises(ChaosError):
        tc.netem_args()
    assert tc.qdisc_handle("r/f0") == tc.qdisc_handle("r/f0") != tc.qdisc_handle("r/f1")
    assert tc.qdisc_handle("r/f0").endswith(":") and not tc.is_default(tc.qdisc_handle("r/f0"))


def test_delay_draw() -> None:
    assert {DelayDraw(10)() for _ in range(10)} == {0.010}
    d = DelayDraw(20, 10, seed=1)
    draws = [d() for _ in range(5000)]
    assert min(draws) >= 0.010 and max(draws) <= 0.030
    assert abs(statistics.fmean(draws) - 0.020) < 0.001
    same = DelayDraw(20, 10, seed=1)
    assert [same() for _ in range(5000)] == draws
    corr = DelayDraw(20, 10, correlation_pct=90, seed=1)
    cd = [corr() for _ in range(5000)]
    step = statistics.fmean(abs(a - b) for a, b in zip(cd, cd[1:], strict=False))
    free = statistics.fmean(abs(a - b) for a, b in zip(draws, draws[1:], strict=False))
    assert step < free / 3, "90 % correlation should make successive delays close"


class FakeBackend:
    groups = None  # no torchft replica groups

    def __init__(self, kind: str, nets: dict[int, NodeNet]) -> None:
        self.kind, self.nets, self.nodes = kind, nets, len(nets) or 2

    def node_net(self, node: int) -> NodeNet | None:
        return self.nets.get(node)


def env_of(kind: str = "netns", nets: dict[int, NodeNet] | None = None) -> FaultEnv:
    return FaultEnv(FakeBackend(kind, nets or {}), WorkerTable(), "run-1", hosts=hosts_here())  # type: ignore[arg-type]


def test_classes_and_mechanisms(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"delay": Delay, "loss": Loss, "bandwidth": Bandwidth, "partition": Partition} == {
        n: fault_class(n) for n in ("delay", "loss", "bandwidth", "partition")}
    delay = DelayFault(fault="delay", node=0, delay_ms=5, trigger=TRIGGER)
    loss = LossFault(fault="loss", node=0, percent=5, trigger=TRIGGER)
    monkeypatch.setattr(tc, "netem_available", lambda: False)
    assert (mechanism_for(delay), mechanism_for(loss)) == ("nfqueue", "iptables")
    monkeypatch.setattr(tc, "netem_available", lambda: True)
    assert (mechanism_for(delay), mechanism_for(loss)) == ("netem", "netem")
    assert mechanism_for(DelayFault(fault="delay", node=0, delay_ms=5, mechanism="nfqueue", trigger=TRIGGER)) \
        == "nfqueue"
    assert mechanism_for(BandwidthFault(fault="bandwidth", node=0, rate_kbit=100, trigger=TRIGGER)) == "tbf"
    assert mechanism_for(PartitionFault(fault="partition", between=[[0], [1]], trigger=TRIGGER)) == "iptables"


def test_preflight_refuses_the_local_backend_and_missing_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    fault = Loss(LossFault(fault="loss", node=0, percent=5, trigger=TRIGGER), "f0")
    with pytest.raises(CapabilityError, match="netns or docker backend"):
        fault.preflight(env_of("local"))
    far = Partition(PartitionFault(fault="partition", between=[[0], [5]], trigger=TRIGGER), "f1")
    with pytest.raises(CapabilityError, match="node 5 does not exist"):
        far.preflight(env_of("netns"))
    monkeypatch.setattr(network, "can_enter_namespaces", lambda: "needs root")
    with pytest.raises(CapabilityError, match="needs root"):
        fault.preflight(env_of("netns"))


def test_preflight_netem_without_netem_names_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network, "can_enter_namespaces", lambda: None)
    monkeypatch.setattr(tc, "netem_status", lambda: (False, "this kernel has no sch_netem"))
    monkeypatch.setattr(tc, "netem_available", lambda: False)
    fault = Loss(LossFault(fault="loss", node=0, percent=5, mechanism="netem", trigger=TRIGGER), "f0")
    with pytest.raises(CapabilityError, match=r"no sch_netem; use mechanism: auto \(iptables -m statistic") as exc:
        fault.preflight(env_of("docker"))
    assert exc.value.missing == "sch_netem"


class FakeTc:
    """Stands in for ``Netns.run``: records commands, keeps one interface's root qdisc."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.root = ("noqueue", "0:")

    def __call__(self, ns: Netns, args: list[str], check: bool = True, timeout: float = 10) -> Any:
        self.calls.append(args)
        out = ""
        if args[:3] == ["tc", "qdisc", "show"]:
            out = f"qdisc {self.root[0]} {self.root[1]} root refcnt 2\n"
        elif args[:3] == ["tc", "qdisc", "replace"]:
            self.root = (args[args.index("handle") + 2], args[args.index("handle") + 1])
        elif args[:3] == ["tc", "qdisc", "del"]:
            self.root = ("noqueue", "0:")
        return subprocess.CompletedProcess(args, 0, out, "")


def test_netem_delay_path_installs_and_heals_only_its_own_qdisc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tc, "netem_available", lambda: True)
    fake = FakeTc()
    monkeypatch.setattr(Netns, "run", lambda self, args, check=True, timeout=10: fake(self, args))
    monkeypatch.setattr(Netns, "exists", lambda self: True)
    env = env_of("docker", {0: NodeNet(0, "n0", "10.0.0.10", "/proc/1/ns/net", "eth0")})
    fault = Delay(DelayFault(fault="delay", node=0, delay_ms=50, jitter_ms=5, trigger=TRIGGER), "f0")
    assert fault.heal(env) is None
    done = fault.inject(env)
    assert done["mechanism"] == "netem" and done["previous_qdisc"] == "noqueue"
    replace = next(c for c in fake.calls if c[:3] == ["tc", "qdisc", "replace"])
    assert replace[3:] == ["dev", "eth0", "root", "handle", tc.qdisc_handle("run-1/f0"), "netem", "delay", "50000us",
                           "5000us"]
    other = Bandwidth(BandwidthFault(fault="bandwidth", node=0, rate_kbit=100, trigger=TRIGGER), "f1")
    with pytest.raises(ChaosError, match="already has a root qdisc netem"):
        other.inject(env)
    assert other.heal(env) is None and fake.root[0] == "netem", "a heal removed another fault's qdisc"
    assert fault.heal(env) == {"mechanism": "netem", "node": 0, "netns": "/proc/1/ns/net", "iface": "eth0",
                               "ip": "10.0.0.10", "removed_qdisc": tc.qdisc_handle("run-1/f0")}
    assert fault.heal(env) is None and fake.root == ("noqueue", "0:")


def test_find_delayers_of_one_run_spares_another_runs() -> None:
    """The check that a run left no delayer looks at that run's chains only (another test's delayer,
    running beside it, made it fail in CI)."""
    import subprocess
    import sys

    import psutil

    from chaos.net.delayer import MODULE, find_delayers
    from chaos.net.iptables import chain_name, run_prefix

    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", MODULE, "--chain",
                               chain_name(run, "f0")]) for run in ("run-a", "run-b")]
    try:
        for p in procs:  # the command line is the child's once it runs
            while MODULE not in psutil.Process(p.pid).cmdline():
                pass
        a, b = (p.pid for p in procs)
        assert {a, b} <= set(find_delayers())
        assert a in find_delayers(chain_prefix=run_prefix("run-a"))
        assert b not in find_delayers(chain_prefix=run_prefix("run-a"))
        assert find_delayers(chain_name("run-b", "f0")) == [b]
    finally:
        for p in procs:
            p.kill()
            p.wait()
