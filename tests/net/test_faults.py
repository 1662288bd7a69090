"""The network faults on real namespaces: what a node's traffic shows with each fault, and that
heal leaves nothing behind."""

from __future__ import annotations

import os
import statistics

import pytest

from chaos.errors import CapabilityError
from chaos.faults.network import Bandwidth, Delay, Loss, Partition, mechanism_for
from chaos.net import measure, tc
from chaos.net.delayer import find_delayers
from chaos.net.iptables import chaos_chains, run_prefix
from chaos.net.netns import Netns
from chaos.scenario import BandwidthFault, DelayFault, LossFault, PartitionFault
from tests.net.conftest import Lab, require_root

ECHO, SINK = 7000, 7001
TRIGGER = {"at_time_s": 0}


def ns(lab: Lab, node: int) -> Netns:
    return Netns(lab.nets[node].netns_path)


def assert_clean(lab: Lab) -> None:
    """No chain of chaos, no configured root qdisc, no delayer of this test in any node."""
    for net in lab.nets:
        assert chaos_chains(Netns(net.netns_path)) == []
        kind, handle = tc.root_qdisc_handle(Netns(net.netns_path), net.iface)
        assert tc.is_default(handle), f"node {net.node} still has root qdisc {kind} {handle}"
    assert find_delayers(chain_prefix=run_prefix(lab.run_id)) == []


def median_rtt(lab: Lab, src: int, dst: int, count: int = 20, interval_ms: float = 10) -> float:
    r = measure.ping(ns(lab, src), lab.nets[dst].ip, ECHO, count=count, interval_ms=interval_ms, timeout_ms=500)
    assert r.loss == 0, f"{r.sent - r.received} of {r.sent} probes lost"
    return statistics.median(r.rtts_ms)


def test_delay_50ms_then_heal(lab: Lab) -> None:
    env = lab.env()
    fault = Delay(DelayFault(fault="delay", node=0, delay_ms=50, trigger=TRIGGER), "f0")
    with measure.server(ns(lab, 1), "echo", ECHO):
        base = median_rtt(lab, 0, 1)
        done = fault.inject(env)
        try:
            assert done["mechanism"] == mechanism_for(fault.spec)
            delayed = median_rtt(lab, 0, 1, interval_ms=20)
            # only a's egress is delayed: b → a replies are not
            assert 45 <= delayed - base <= 55, f"extra RTT {delayed - base:.2f} ms for 50 ms of delay"
        finally:
            healed = fault.heal(env)
        assert healed is not None and fault.heal(env) is None
        after = median_rtt(lab, 0, 1)
        assert after <= base + 2, f"RTT after heal {after:.2f} ms vs baseline {base:.2f} ms"
    assert_clean(lab)


def test_loss_10pct(lab: Lab) -> None:
    env = lab.env()
    fault = Loss(LossFault(fault="loss", node=0, percent=10, trigger=TRIGGER), "f1")
    with measure.server(ns(lab, 1), "echo", ECHO):
        fault.inject(env)
        try:
            # requests leave a (dropped at 10 %), replies leave b (untouched): loss counts requests
            r = measure.ping(ns(lab, 0), lab.nets[1].ip, ECHO, count=2000, interval_ms=0.5, timeout_ms=300)
            assert 0.05 <= r.loss <= 0.15, f"observed loss {r.loss:.3f} over {r.sent} probes for 10 %"
        finally:
            assert fault.heal(env) is not None
        assert fault.heal(env) is None
        r = measure.ping(ns(lab, 0), lab.nets[1].ip, ECHO, count=300, interval_ms=0.5, timeout_ms=300)
        assert r.loss == 0
    assert_clean(lab)


def test_loss_slows_tcp_like_a_lossy_link(lab: Lab) -> None:
    """TCP must see the loss (retransmit timeouts, duplicate ACKs): a drop the sender's own stack
    reports back is simply retried and would barely slow it."""
    env = lab.env()
    fault = Loss(LossFault(fault="loss", node=0, percent=10, trigger=TRIGGER), "f4")
    with measure.server(ns(lab, 1), "sink", SINK):
        free = measure.send(ns(lab, 0), lab.nets[1].ip, SINK, 20_000_000)
        fault.inject(env)
        try:
            lossy = measure.send(ns(lab, 0), lab.nets[1].ip, SINK, 20_000_000)
        finally:
            fault.heal(env)
    assert lossy["kbit_s"] < free["kbit_s"] / 5, f"{lossy['kbit_s']:.0f} vs {free['kbit_s']:.0f} kbit/s"
    assert_clean(lab)


def test_bandwidth_tbf(lab: Lab) -> None:
    env = lab.env()
    fault = Bandwidth(BandwidthFault(fault="bandwidth", node=0, rate_kbit=8000, trigger=TRIGGER), "f2")
    with measure.server(ns(lab, 1), "sink", SINK):
        done = fault.inject(env)
        try:
            assert done["mechanism"] == "tbf" and tc.root_qdisc(ns(lab, 0), "eth0") == "tbf"
            capped = measure.send(ns(lab, 0), lab.nets[1].ip, SINK, 1_500_000)
            assert 6000 <= capped["kbit_s"] <= 10000, f"{capped['kbit_s']:.0f} kbit/s under an 8000 kbit/s cap"
        finally:
            assert fault.heal(env) is not None
        assert fault.heal(env) is None
        free = measure.send(ns(lab, 0), lab.nets[1].ip, SINK, 20_000_000)
        assert free["kbit_s"] > 5 * 8000, f"{free['kbit_s']:.0f} kbit/s after heal"
    assert_clean(lab)


def reachable(lab: Lab, src: int, dst: int) -> bool:
    r = measure.ping(ns(lab, src), lab.nets[dst].ip, ECHO, count=3, interval_ms=5, timeout_ms=300)
    return r.received > 0


def test_partition_both_ways_and_heal(lab: Lab) -> None:
    env = lab.env()
    fault = Partition(PartitionFault(fault="partition", between=[[0, 2], [1]], trigger=TRIGGER), "f3")
    servers = [measure.server(ns(lab, n), "echo", ECHO) for n in range(3)]
    for s in servers:
        s.__enter__()
    try:
        assert reachable(lab, 0, 1) and reachable(lab, 1, 0)
        done = fault.inject(env)
        try:
            assert done["mechanism"] == "iptables"
            assert not reachable(lab, 0, 1), "a reached b across the partition"
            assert not reachable(lab, 1, 0), "b reached a across the partition"
            assert not reachable(lab, 1, 2), "b reached c across the partition"
            assert reachable(lab, 0, 2) and reachable(lab, 2, 0), "traffic within a side was cut"
        finally:
            healed = fault.heal(env)
        assert healed is not None and sorted(healed["nodes"]) == [0, 1, 2]
        assert fault.heal(env) is None
        assert reachable(lab, 0, 1) and reachable(lab, 1, 0) and reachable(lab, 1, 2)
    finally:
        for s in reversed(servers):
            s.__exit__(None, None, None)
    assert_clean(lab)


def test_heal_before_inject_is_a_no_op(lab: Lab) -> None:
    env = lab.env()
    faults = [
        Delay(DelayFault(fault="delay", node=0, delay_ms=5, trigger=TRIGGER), "f0"),
        Loss(LossFault(fault="loss", node=0, percent=5, trigger=TRIGGER), "f1"),
        Bandwidth(BandwidthFault(fault="bandwidth", node=0, rate_kbit=1000, trigger=TRIGGER), "f2"),
        Partition(PartitionFault(fault="partition", between=[[0], [1]], trigger=TRIGGER), "f3"),
    ]
    for f in faults:
        assert f.heal(env) is None
        assert f.ready(env)
    assert_clean(lab)


def test_delay_and_loss_together_then_heal(lab: Lab) -> None:
    """Two faults on one node at once: loss applies to delayed traffic, once (not again when the
    delayer sends a packet a second time); healing them in either order leaves nothing."""
    env = lab.env()
    delay = Delay(DelayFault(fault="delay", node=0, delay_ms=20, trigger=TRIGGER), "f0")
    loss = Loss(LossFault(fault="loss", node=0, percent=30, trigger=TRIGGER), "f1")
    with measure.server(ns(lab, 1), "echo", ECHO):
        try:
            delay.inject(env)
            loss.inject(env)
            r = measure.ping(ns(lab, 0), lab.nets[1].ip, ECHO, count=800, interval_ms=1, timeout_ms=300)
            # drawn twice it would be 51 %
            assert 0.22 <= r.loss <= 0.38, f"observed loss {r.loss:.3f} for 30 % on delayed traffic"
            assert statistics.median(r.rtts_ms) >= 18
            assert loss.heal(env) is not None
            assert median_rtt(lab, 0, 1) >= 18
        finally:
            delay.heal(env)
            loss.heal(env)
    assert_clean(lab)


def test_netem_asked_without_netem_names_the_fallback(lab: Lab) -> None:
    if tc.netem_available():
        pytest.skip("this kernel has sch_netem")
    env = lab.env()
    delay = Delay(DelayFault(fault="delay", node=0, delay_ms=5, mechanism="netem", trigger=TRIGGER), "f0")
    with pytest.raises(CapabilityError, match="mechanism: auto") as exc:
        delay.preflight(env)
    assert exc.value.missing == "sch_netem"
    Delay(DelayFault(fault="delay", node=0, delay_ms=5, trigger=TRIGGER), "f0").preflight(env)
    Loss(LossFault(fault="loss", node=0, percent=5, trigger=TRIGGER), "f1").preflight(env)
    assert mechanism_for(DelayFault(fault="delay", node=0, delay_ms=5, trigger=TRIGGER)) == "nfqueue"


def test_without_root_these_tests_skip_but_fail_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="need root"):
        require_root()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_root()
