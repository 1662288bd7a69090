"""The bundled scenarios give the same verdicts with their nodes allocated by a real Slurm cluster as
on network namespaces (issue 16): a killed worker, and an elastic job (3 nodes, --nnodes=2:3) that
loses a node and gets it back, and a disk stall during a save (the FUSE filesystem mounted on each
node over its own checkpoints, from inside the node's job step). Each node is a node of the
allocation, its agent inside a job step."""

from __future__ import annotations

import shutil
import tempfile
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
]
NODE_LOCAL = {"disk-stall-during-save.yaml"}  # disk faults need each node's own checkpoints


@pytest.mark.chaos(requires=["torch", "sklearn", "slurm", "iptables"])
@pytest.mark.parametrize(("name", "topology"), CASES, ids=[c[0].removesuffix(".yaml") for c in CASES])
def test_the_same_verdicts_on_slurm_as_on_netns(slurm3: Any, tmp_path: Path, name: str,
                                               topology: dict[str, Any]) -> None:
    ckpt = None if name in NODE_LOCAL else Path(tempfile.mkdtemp(prefix="chaos-slurm-ckpt-"))  # a shared filesystem
    try:
        slurm = run_scenario(load_scenario(on_slurm(name, slurm3, tmp_path, topology=topology, checkpoint_dir=ckpt)),
                             tmp_path / "runs")
    finally:
        if ckpt is not None:
            shutil.rmtree(ckpt, ignore_errors=True)
    netns = run_scenario(load_scenario(on_netns(name, tmp_path, topology=topology)), tmp_path / "runs")
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
    assert slurm3.jobs() == []
