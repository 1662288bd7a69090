"""Backends: where a scenario's nodes live (``local``, ``netns``, ``docker``, ``ssh``, ``slurm``)."""

from __future__ import annotations

from pathlib import Path

from chaos.backends.base import Backend, LaunchSpec, NodeNet
from chaos.backends.local import LocalBackend
from chaos.history import RunnerLog
from chaos.scenario import BackendSpec

BACKENDS = {
    "local": "each node is a torchrun agent on this host (c10d rendezvous on loopback); no network faults",
    "netns": "each node is a network namespace with its own IP on a bridge (veth); needs root",
    "docker": "each node is a container on a bridge network (Docker engine); image built locally or yours",
    "ssh": "each node is a host reached over SSH (its own processes, clock and disk); known_hosts checked",
    "slurm": "each node is a node of a Slurm allocation chaos submits (sbatch); driven through job steps (srun)",
}


def make_backend(spec: BackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> Backend:
    """The backend for ``spec`` (dispatch on ``spec.kind``)."""
    if spec.kind == "netns":
        from chaos.backends.netns import NetnsBackend

        return NetnsBackend(spec, run_id, run_dir, log)
    if spec.kind == "docker":
        from chaos.backends.docker import DockerBackend

        return DockerBackend(spec, run_id, run_dir, log)
    if spec.kind == "ssh":
        from chaos.backends.ssh.backend import SshBackend

        return SshBackend(spec, run_id, run_dir, log)
    if spec.kind == "slurm":
        from chaos.backends.slurm.backend import SlurmBackend

        return SlurmBackend(spec, run_id, run_dir, log)
    return LocalBackend(spec, run_id, run_dir, log)


__all__ = ["BACKENDS", "Backend", "LaunchSpec", "LocalBackend", "NodeNet", "make_backend"]
