"""Network and node faults on real containers: delay, loss and bandwidth measured from inside the
nodes, and an elastic job losing a container and getting it back (world size 3 → 2 → 3)."""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.backends.base import LaunchSpec
from chaos.backends.docker import DockerBackend
from chaos.faults.base import FaultEnv
from chaos.faults.network import Bandwidth, Delay, Loss
from chaos.history import RunnerLog
from chaos.net import measure
from chaos.net.iptables import chaos_chains
from chaos.net.netns import Netns
from chaos.run.this_machine import ThisMachine
from chaos.scenario import BandwidthFault, DelayFault, DockerBackendSpec, LossFault
from chaos.worker_table import WorkerTable
from tests.conftest import SCENARIOS

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn", "docker", "iptables"])]
ECHO, SINK = 7100, 7101
TRIGGER = {"at_time_s": 0}
IDLE = "import time\ntime.sleep(600)\n"  # a worker that only keeps its container up


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[DockerBackend, FaultEnv]]:
    """Two running containers (one idle rank each) and the fault environment over them."""
    script = tmp_path / "script" / "idle.py"
    script.parent.mkdir()
    script.write_text(IDLE)
    run_id = f"test-dnet-{secrets.token_hex(3)}"
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    spec = DockerBackendSpec(kind="docker", nodes=2, nproc_per_node=1)
    backend = DockerBackend(spec, run_id, run_dir, RunnerLog(run_dir / "runner.jsonl"))
    try:
        backend.start(LaunchSpec(str(script), [], {"CHAOS_RUN_ID": run_id, "CHAOS_RUN_DIR": str(run_dir)}))
        deadline = time.time() + 60
        while any(backend.node_net(n) is None for n in range(2)):
            assert time.time() < deadline, "containers did not come up"
            time.sleep(0.2)
        yield backend, FaultEnv(backend, WorkerTable(resolve=backend.host_pid), run_id, hosts=ThisMachine(run_dir))
    finally:
        backend.teardown()


def ns(backend: DockerBackend, node: int) -> Netns:
    net = backend.node_net(node)
    assert net is not None
    return Netns(net.netns_path)


def rtt_ms(backend: DockerBackend) -> float:
    net1 = backend.node_net(1)
    assert net1 is not None
    r = measure.ping(ns(backend, 0), net1.ip, ECHO, count=30, interval_ms=10, timeout_ms=1000)
    assert r.loss == 0
    return statistics.median(r.rtts_ms)


def test_delay_between_containers_measured_from_inside(nodes: tuple[DockerBackend, FaultEnv]) -> None:
    backend, env = nodes
    fault = Delay(DelayFault(fault="delay", node=0, delay_ms=50, trigger=TRIGGER), "f0")
    with measure.server(ns(backend, 1), "echo", ECHO):
        base = rtt_ms(backend)
        done = fault.inject(env)
        try:
            delayed = rtt_ms(backend)
        finally:
            fault.heal(env)
        after = rtt_ms(backend)
    assert done["iface"] == "eth0" and done["mechanism"] in ("netem", "nfqueue")
    # never less than asked; above it by the userspace delayer's scheduling, which a busy machine
    # (CI under a CPU hog: 55.5 ms) stretches — benchmarks/NET_FIDELITY.md measures the idle figure
    assert 45 <= delayed - base <= 65, f"extra RTT {delayed - base:.1f} ms for 50 ms injected"
    assert after <= base + 2, f"RTT after heal {after:.2f} ms vs {base:.2f} ms"
    assert chaos_chains(ns(backend, 0)) == []


def test_loss_between_containers_measured_from_inside(nodes: tuple[DockerBackend, FaultEnv]) -> None:
    backend, env = nodes
    fault = Loss(LossFault(fault="loss", node=0, percent=10, trigger=TRIGGER), "f1")
    net1 = backend.node_net(1)
    assert net1 is not None
    with measure.server(ns(backend, 1), "echo", ECHO):
        fault.inject(env)
        try:
            r = measure.ping(ns(backend, 0), net1.ip, ECHO, count=1500, interval_ms=0.5, timeout_ms=300)
        finally:
            fault.heal(env)
        clean = measure.ping(ns(backend, 0), net1.ip, ECHO, count=200, interval_ms=0.5, timeout_ms=300)
    assert 0.05 <= r.loss <= 0.15, f"observed loss {r.loss:.3f} over {r.sent} probes for 10 %"
    assert clean.loss == 0
    assert chaos_chains(ns(backend, 1)) == []


def test_bandwidth_between_containers_measured_from_inside(nodes: tuple[DockerBackend, FaultEnv]) -> None:
    backend, env = nodes
    fault = Bandwidth(BandwidthFault(fault="bandwidth", node=0, rate_kbit=8000, trigger=TRIGGER), "f2")
    net1 = backend.node_net(1)
    assert net1 is not None
    with measure.server(ns(backend, 1), "sink", SINK):
        fault.inject(env)
        try:
            capped = measure.send(ns(backend, 0), net1.ip, SINK, 1_500_000)
        finally:
            fault.heal(env)
        free = measure.send(ns(backend, 0), net1.ip, SINK, 20_000_000)
    assert 6000 <= capped["kbit_s"] <= 10000, f"{capped['kbit_s']:.0f} kbit/s under an 8000 kbit/s cap"
    assert free["kbit_s"] > 5 * 8000


def test_node_loss_elastic_on_docker_regroups_3_2_3(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "node-loss-elastic.yaml", overrides={"backend": {"kind": "docker"}})
    result.assert_ok()
    sizes: list[int] = []
    for e in result.events:
        if e["kind"] == "start" and e.get("source") != "runner" and (not sizes or sizes[-1] != e["world_size"]):
            sizes.append(e["world_size"])
    assert sizes == [3, 2, 3]
    crash = next(e for e in result.events if e["kind"] == "fault_inject")
    assert crash["fault"] == "node-crash"


def test_network_delay_scenario_on_docker_slows_the_job_and_matches_the_reference(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "network-delay.yaml", overrides={"backend": {"kind": "docker"}})
    result.assert_ok()
    slowdown = result.verdict("step_time")
    assert slowdown.value is not None and slowdown.value > 5, slowdown.explanation
