"""The bundled scenarios give the same verdicts with their nodes on real SSH hosts as on network
namespaces (issue 15): process kills, an elastic node loss and return, a network delay, packet loss
and a partition, a paused rank, a parameter bit flip, a damaged checkpoint (and the checks that read
checkpoints) and a disk stall during a save, on hosts with their own process tables and work
directories."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from chaos import load_scenario, run_scenario
from tests.ssh.conftest import on_netns, on_ssh, shared_dir

pytestmark = [pytest.mark.e2e]

CASES = [
    ("kill-worker.yaml", {"nodes": 2, "nproc_per_node": 1}),  # bundled on one local node: here one rank per host
    ("node-loss-elastic.yaml", {}),
    ("network-delay.yaml", {}),
    ("partition.yaml", {}),
    ("packet-loss.yaml", {}),
    ("pause-rank.yaml", {"nodes": 2, "nproc_per_node": 1}),
    ("sdc-param-bitflip.yaml", {"nodes": 3, "nproc_per_node": 1}),  # the probe's own fault, on every host
    # the checkpoints on the hosts: damaged there, verified there by the checkpoint watcher
    ("corrupt-latest-checkpoint.yaml", {"nodes": 2, "nproc_per_node": 1}),
    # the disk fault's filesystem mounted on each host over its own checkpoint directory (node-local)
    ("disk-stall-during-save.yaml", {"nodes": 2, "nproc_per_node": 1}),
]
NODE_LOCAL = {"disk-stall-during-save.yaml"}  # disk faults need each host's own checkpoints


@pytest.mark.chaos(requires=["torch", "sklearn", "sshd", "iptables"])
@pytest.mark.parametrize(("name", "topology"), CASES, ids=[c[0].removesuffix(".yaml") for c in CASES])
def test_the_same_verdicts_on_ssh_hosts_as_on_netns(lab3: Any, tmp_path: Path, name: str,
                                                    topology: dict[str, Any]) -> None:
    ckpt = None if name in NODE_LOCAL else shared_dir()
    try:
        ssh = run_scenario(load_scenario(on_ssh(name, lab3, tmp_path, topology=topology, checkpoint_dir=ckpt)),
                           tmp_path / "runs")
    finally:
        if ckpt is not None:
            shutil.rmtree(ckpt, ignore_errors=True)
    netns = run_scenario(load_scenario(on_netns(name, tmp_path, topology=topology)), tmp_path / "runs")
    got = {v.check: v.status for v in ssh.verdicts}
    want = {v.check: v.status for v in netns.verdicts}
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in [*ssh.verdicts, *netns.verdicts])
    assert got == want, explain
    assert netns.ok and ssh.ok, explain  # the bundled scenarios pass on a correct job
    kinds = [e["kind"] for e in ssh.events]
    assert kinds.count("clock_offsets") == 2 and "fault_inject" in kinds
    nodes = ssh.scenario.backend.nodes
    hosts = {e["host"] for e in ssh.events if e["kind"] == "agent_start"}
    assert hosts == {f"root@{h['address']}" for h in lab3.host_specs()[:nodes]}  # each node on its own host
