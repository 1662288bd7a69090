"""What this machine can do, asked before a run starts (the seed of ``chaos doctor``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable


def _torch() -> str | None:
    return None if importlib.util.find_spec("torch") else "torch is not installed; pip install torch==2.13.0"


def _sklearn() -> str | None:
    if importlib.util.find_spec("sklearn"):
        return None
    return "scikit-learn (the bundled target's dataset) is not installed; pip install scikit-learn"


def _package(module: str, extra: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        return None if importlib.util.find_spec(module) else (
            f"{module} is not installed; pip install 'chaos-training[{extra}]'")
    return probe


def _root() -> str | None:
    return None if os.geteuid() == 0 else "needs root (CAP_NET_ADMIN/CAP_SYS_ADMIN); run as root"


def _gpu() -> str | None:
    try:
        import torch

        return None if torch.cuda.is_available() else "no CUDA device on this machine"
    except ImportError:
        return "torch is not installed"


def _docker() -> str | None:
    if shutil.which("docker") is None and not os.path.exists("/var/run/docker.sock"):
        return "no Docker engine (apt-get install docker.io, then start dockerd)"
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return None
    except Exception as exc:
        return f"the Docker engine does not answer ({type(exc).__name__}); start dockerd"


def _netns() -> str | None:
    if os.geteuid() != 0:
        return ("backend netns needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN to create namespaces and links); run "
                "chaos as root, or use backend: local (no network faults) or docker")
    if shutil.which("nsenter") is None or shutil.which("ip") is None:
        return "backend netns needs nsenter and ip (apt-get install util-linux iproute2)"
    if importlib.util.find_spec("pyroute2") is None:
        return "backend netns needs pyroute2; pip install pyroute2"
    return None


def _iptables() -> str | None:
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    return None if os.geteuid() == 0 else "iptables needs root (CAP_NET_ADMIN)"


def _fuse() -> str | None:
    from chaos.disk.mount import fuse_status

    ok, why = fuse_status()
    return None if ok else why


def _sshd() -> str | None:
    """What the ssh test lab (real sshd hosts in namespaces on this machine) needs."""
    if importlib.util.find_spec("paramiko") is None:
        return "the ssh backend needs paramiko; pip install paramiko"
    if not os.path.exists("/usr/sbin/sshd"):
        return "the ssh test lab needs sshd (apt-get install openssh-server)"
    return _netns()


def _slurm() -> str | None:
    """What the Slurm test lab (a real slurmctld, munged and one slurmd per namespace node) needs."""
    import shutil

    for tool in ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo",
                 "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"the slurm test lab needs {tool} (apt-get install slurmctld slurmd slurm-client munge util-linux)"
    return _netns()


def _cgroup2() -> str | None:
    from chaos.cgroup2 import cgroup_status

    ok, why = cgroup_status()
    return None if ok else why


CAPABILITIES: dict[str, Callable[[], str | None]] = {
    "torch": _torch,
    "sklearn": _sklearn,
    "root": _root,
    "gpu": _gpu,
    "docker": _docker,
    "netns": _netns,
    "iptables": _iptables,
    "fuse": _fuse,
    "sshd": _sshd,
    "slurm": _slurm,
    "lightning": _package("lightning", "lightning"),
    "accelerate": _package("accelerate", "accelerate"),
    "torchft": _package("torchft", "torchft"),
    "cgroup2": _cgroup2,
}


def missing(names: list[str]) -> dict[str, str]:
    """name → why it is missing, for each capability in ``names`` this machine lacks.

    Raises KeyError naming an unknown capability."""
    out = {}
    for name in names:
        if name not in CAPABILITIES:
            raise KeyError(f"unknown capability {name!r}; known: {', '.join(CAPABILITIES)}")
        why = CAPABILITIES[name]()
        if why:
            out[name] = why
    return out
