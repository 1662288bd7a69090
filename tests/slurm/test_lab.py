"""The Slurm test lab is a real cluster and leaves nothing behind (issue 16): its nodes are idle,
each has its own hostname that resolves on every node, a job step runs there, and stopping it
removes every daemon, namespace, link and file."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.labs import settled

pytestmark = [pytest.mark.e2e]


@pytest.mark.chaos(requires=["slurm"])
def test_the_lab_is_a_real_cluster_of_named_nodes(slurm3: Any) -> None:
    out = subprocess.run(["srun", "-N3", "--ntasks-per-node=1", "-t", "1", "hostname"], capture_output=True,
                         text=True, env=slurm3.env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(slurm3.names)
    # torchrun resolves its own hostname (SLURM-LAB.md): every node resolves every other's name
    got = slurm3.exec(0, ["getent", "hosts", slurm3.names[2]]).stdout.split()
    assert got[:1] == [slurm3.addresses[2]]
    # srun returns once its step ends; the job stays COMPLETING until Slurm has released its nodes
    assert settled(slurm3.jobs, 30) == []


@pytest.mark.chaos(requires=["slurm"])
def test_a_stopped_lab_leaves_nothing() -> None:
    from chaos.labs.slurm import SlurmLab

    lab = SlurmLab(1)
    with lab:
        assert lab.slurmd_pid(0) is not None
    assert lab.leftovers() == []
