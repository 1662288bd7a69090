"""The bundled scenarios give the same verdicts with their nodes allocated by a real Slurm cluster as
on network namespaces (issue 16): a killed worker, and an elastic job (3 nodes, --nnodes=2:3) that
loses a node and gets it back, and a disk stall during a save (the FUSE filesystem mounted on each
node over its own checkpoints, from inside the node's job step). Each node is a node of the
allocation, its agent inside a job step; or, reached over SSH (reach: ssh), outside any step."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from chaos import load_scenario, run_scenario
from tests.slurm.conftest import on_slurm
from tests.ssh.conftest import on_netns

pytestmark = [pytest.mark.e2e]

CASES = [
    ("kill-worker.yaml", {"nodes": 2, "nproc_per_node": 1}),
    ("node-loss-elastic.yaml", {}),
    # the disk fault's filesystem mounted on each node over its own checkpoint directory (node-local)
    ("disk-stall-during-save.yaml", {"nodes": 2, "nproc_per_node": 1}),
    # the nodes reached over SSH (reach: ssh), the agents outside the job's steps
    ("kill-worker.yaml", {"nodes": 2, "nproc_per_node": 1, "reach": "ssh"}),
]
IDS = ["kill-worker", "node-loss-elastic", "disk-stall-during-save", "kill-worker-over-ssh"]
NODE_LOCAL = {"disk-stall-during-save.yaml"}  # disk faults need each node's own checkpoints


@pytest.mark.chaos(requires=["torch", "sklearn", "slurm", "iptables"])
@pytest.mark.parametrize(("name", "topology"), CASES, ids=IDS)
def test_the_same_verdicts_on_slurm_as_on_netns(slurm3: Any, tmp_path: Path, name: str,
                                               topology: dict[str, Any]) -> None:
    ckpt = None if name in NODE_LOCAL else Path(tempfile.mkdtemp(prefix="chaos-slurm-ckpt-"))  # a shared filesystem
    over_ssh = topology.get("reach") == "ssh"
    steps: set[str] = set()  # the job steps' names seen while the run ran
    watching = threading.Event()
    watch = threading.Thread(target=_watch_steps, args=(slurm3, steps, watching))
    watch.start()
    try:
        slurm = run_scenario(load_scenario(on_slurm(name, slurm3, tmp_path, checkpoint_dir=ckpt, topology={
            **topology, **({"ssh": slurm3.ssh_spec()} if over_ssh else {})})), tmp_path / "runs")
    finally:
        watching.set()
        watch.join()
        if ckpt is not None:
            shutil.rmtree(ckpt, ignore_errors=True)
    fixed = {k: v for k, v in topology.items() if k != "reach"}
    netns = run_scenario(load_scenario(on_netns(name, tmp_path, topology=fixed)), tmp_path / "runs")
    got = {v.check: v.status for v in slurm.verdicts}
    want = {v.check: v.status for v in netns.verdicts}
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in [*slurm.verdicts, *netns.verdicts])
    assert got == want, explain
    assert netns.ok and slurm.ok, explain
    kinds = [e["kind"] for e in slurm.events]
    assert kinds.count("slurm_allocation") == 1 and kinds.count("slurm_job_end") == 1
    alloc = next(e for e in slurm.events if e["kind"] == "slurm_allocation")
    nodes = slurm.scenario.backend.nodes
    assert len(alloc["nodes"]) == nodes and set(alloc["nodes"]) <= set(slurm3.names)
    hosts = {e["host"] for e in slurm.events if e["kind"] == "agent_start"}
    assert hosts == set(alloc["nodes"])  # each node's agent on its own allocated node
    if name in NODE_LOCAL:  # the stall was the nodes' FUSE filesystem's, in force on the node of rank 0
        inject = next(e for e in slurm.events if e["kind"] == "fault_inject")
        assert inject["fault"] == "disk" and "disk_mount" in kinds, inject
        assert "disk_stall_begin" in kinds and "disk_stall_end" in kinds, sorted(set(kinds))
    # over srun each node's daemon (and its agent) is a job step; over SSH only an anchor step per node
    assert ("chaos-hostd" in steps) == (not over_ssh) and ("chaos-anchor" in steps) == over_ssh, steps
    assert "scheduler_job_end" not in kinds  # Slurm did not end the job: chaos did, after the run
    assert next(e for e in slurm.events if e["kind"] == "slurm_submit")["reach"] == ("ssh" if over_ssh else "srun")
    assert slurm3.jobs() == []


def _watch_steps(lab: Any, seen: set[str], stop: threading.Event) -> None:
    """Until ``stop``, the names of the lab's job steps (``squeue -s``) added to ``seen``."""
    while not stop.wait(0.5):
        out = subprocess.run(["squeue", "-h", "-s", "-o", "%j"], env=lab.env, capture_output=True, text=True,
                             timeout=30, check=False)
        seen.update(out.stdout.split())
