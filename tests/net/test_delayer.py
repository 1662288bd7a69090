"""The NFQUEUE delayer on its own: order, jitter, a busy queue, and a runner that dies."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time

import psutil
import pytest

from chaos.errors import ChaosError
from chaos.net import measure
from chaos.net.delayer import Delayer
from chaos.net.iptables import chain_name, chaos_chains
from chaos.net.netns import Netns
from tests.net.conftest import Lab

ECHO = 7000


def test_order_kept_without_jitter_and_jitter_spreads(lab: Lab) -> None:
    a, b = Netns(lab.nets[0].netns_path), Netns(lab.nets[1].netns_path)
    d = Delayer()
    with measure.server(b, "echo", ECHO):
        try:
            d.start(a, "eth0", 11, chain_name(lab.run_id, "order"), delay_ms=10)
            r = measure.ping(a, lab.nets[1].ip, ECHO, count=300, interval_ms=0.2, timeout_ms=300)
            assert r.loss == 0 and r.arrival == sorted(r.arrival), "replies overtook each other with no jitter"
            d.stop()
            d.start(a, "eth0", 11, chain_name(lab.run_id, "jitter"), delay_ms=20, jitter_ms=10, seed=1)
            r = measure.ping(a, lab.nets[1].ip, ECHO, count=100, interval_ms=5, timeout_ms=300)
            assert r.loss == 0
            # never early (a hard floor); the upper side only on the median: a busy machine adds
            # scheduling delay to single replies, which says nothing about the delayer
            assert min(r.rtts_ms) >= 9, min(r.rtts_ms)
            assert 15 <= statistics.median(r.rtts_ms) <= 28, statistics.median(r.rtts_ms)
            assert statistics.pstdev(r.rtts_ms) > 3, "±10 ms of jitter left the delays nearly constant"
        finally:
            d.stop()
    assert d.stop() is None
    assert chaos_chains(a) == []


def test_packets_too_long_to_copy_are_delayed_too(lab: Lab) -> None:
    """A 6000-byte datagram leaves unfragmented through OUTPUT, beyond the delayer's copy range:
    it is held in the kernel and accepted late instead of being copied."""
    a, b = Netns(lab.nets[0].netns_path), Netns(lab.nets[1].netns_path)
    d = Delayer()
    with measure.server(b, "echo", ECHO):
        try:
            d.start(a, "eth0", 14, chain_name(lab.run_id, "big"), delay_ms=10)
            for size in (6000, 1000):
                r = measure.ping(a, lab.nets[1].ip, ECHO, count=20, interval_ms=5, timeout_ms=300, size=size)
                assert r.loss == 0 and 9 <= statistics.median(r.rtts_ms) <= 12, (size, r)
        finally:
            d.stop()


def test_tcp_keeps_flowing_under_a_long_delay(lab: Lab) -> None:
    """Packets held for 50 ms must not stall the sending TCP socket (TCP Small Queues counts the
    kernel's packets while they wait: holding them cut a bulk transfer to 0.5 Mbit/s here)."""
    a, b = Netns(lab.nets[0].netns_path), Netns(lab.nets[1].netns_path)
    d = Delayer()
    with measure.server(b, "sink", ECHO + 1):
        try:
            d.start(a, "eth0", 15, chain_name(lab.run_id, "tcp"), delay_ms=50)
            got = measure.send(a, lab.nets[1].ip, ECHO + 1, 3_000_000)
            assert got["kbit_s"] > 10_000, f"{got['kbit_s']:.0f} kbit/s through a 50 ms delay"
        finally:
            d.stop()


def test_busy_queue_fails_cleanly(lab: Lab) -> None:
    a = Netns(lab.nets[0].netns_path)
    first, second = Delayer(), Delayer()
    try:
        first.start(a, "eth0", 12, chain_name(lab.run_id, "one"), delay_ms=1)
        with pytest.raises(ChaosError, match="not ready"):
            second.start(a, "eth0", 12, chain_name(lab.run_id, "two"), delay_ms=1)
        assert second.pid is None and chaos_chains(a) == [chain_name(lab.run_id, "one")]
    finally:
        second.stop()
        first.stop()
    assert chaos_chains(a) == []


RUNNER = """
import sys, time
from chaos.net.delayer import Delayer
from chaos.net.netns import Netns
d = Delayer()
d.start(Netns(sys.argv[1]), "eth0", 13, sys.argv[2], delay_ms=5)
print(d.pid, flush=True)
time.sleep(60)
"""


def test_delayer_exits_when_its_runner_is_killed(lab: Lab) -> None:
    a = Netns(lab.nets[0].netns_path)
    chain = chain_name(lab.run_id, "orphan")
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, a.path, chain], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    delayer_pid = None
    try:
        assert runner.stdout is not None
        delayer_pid = int(runner.stdout.readline())
        assert chaos_chains(a) == [chain]
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        proc = psutil.Process(delayer_pid)
        t0 = time.monotonic()
        proc.wait(timeout=5)
        assert time.monotonic() - t0 < 3, "the delayer outlived its runner by over 3 s"
        assert chaos_chains(a) == [], "the orphaned delayer left its NFQUEUE chain"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        if delayer_pid is not None and psutil.pid_exists(delayer_pid):
            os.kill(delayer_pid, signal.SIGKILL)
