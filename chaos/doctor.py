"""``chaos doctor``: which backends and fault mechanisms this machine supports, and why not.

Every probe is real and leaves nothing behind: qdiscs and iptables rules are tried in a throwaway
network namespace (``unshare --net``) that vanishes with the probe; the Docker engine is pinged.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from chaos.capabilities import CAPABILITIES
from chaos.gpuinfo import GpuInfo, gpu_info


@dataclass
class Finding:
    """One row: ``status`` is ``ok``, ``fallback`` (works, by another mechanism) or ``missing``."""

    group: str
    name: str
    status: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _row(group: str, name: str, why_not: str | None, ok_detail: str) -> Finding:
    return Finding(group, name, "ok" if why_not is None else "missing", ok_detail if why_not is None else why_not)


def _cap_net_admin() -> str | None:
    from chaos.net.netns import can_enter_namespaces

    return can_enter_namespaces()


def _qdisc(kind: list[str]) -> str | None:
    from chaos.net.netns import in_throwaway_netns

    if shutil.which("tc") is None:
        return "`tc` is not installed (apt-get install iproute2)"
    ok, why = in_throwaway_netns(["tc", "qdisc", "replace", "dev", "lo", "root", *kind])
    return None if ok else why


def _nfqueue_binding() -> str | None:
    if importlib.util.find_spec("netfilterqueue") is None:
        return "the NetfilterQueue binding is missing (apt-get install libnetfilter-queue-dev; pip install NetfilterQueue)"
    return None


def _freezer() -> str | None:
    if Path("/sys/fs/cgroup/freezer").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return None
    return "no cgroup freezer (docker pause of a whole node will not work)"


def findings() -> list[Finding]:
    """Probe the machine (needs a few seconds: it starts throwaway namespaces and pings Docker)."""
    out: list[Finding] = []
    root = CAPABILITIES["root"]()
    out.append(_row("privilege", "root", root, f"uid {os.geteuid()}"))
    can_ns = _cap_net_admin() if root is not None else None
    out.append(_row("privilege", "CAP_NET_ADMIN + CAP_SYS_ADMIN", can_ns, "may create and enter network namespaces"))
    privileged = root is None or can_ns is None

    from chaos.net.iptables import iptables_status
    from chaos.net.tc import netem_status

    netem_ok, netem_why = netem_status() if privileged else (False, "needs root")
    ipt_ok, ipt_why = iptables_status() if privileged else (False, "needs root")
    tbf = _qdisc(["tbf", "rate", "1mbit", "burst", "32kbit", "latency", "50ms"]) if privileged else "needs root"
    nfq = _nfqueue_binding()
    docker = CAPABILITIES["docker"]()
    netns = CAPABILITIES["netns"]()

    fallback = " — delay falls back to the NFQUEUE delayer, loss to iptables (mechanism: auto)"
    out.append(_row("kernel", "netem (sch_netem)", None if netem_ok else netem_why + fallback, "tc qdisc netem works"))
    out.append(_row("kernel", "tbf (sch_tbf)", tbf, "tc qdisc tbf works"))
    out.append(_row("kernel", "iptables statistic + NFQUEUE", None if ipt_ok else ipt_why,
                    "iptables (" + (_iptables_flavour() or "?") + ") can drop at random and queue to userspace"))
    out.append(_row("kernel", "NFQUEUE binding", nfq, "NetfilterQueue imports (the userspace delayer)"))
    out.append(_row("kernel", "FUSE", CAPABILITIES["fuse"](), "/dev/fuse, fusermount3 and the mfusepy binding work "
                    "(disk faults)"))
    out.append(_row("kernel", "cgroup freezer", _freezer(), "docker pause can freeze a node"))

    out.append(_row("backend", "local", CAPABILITIES["torch"](), "torchrun agents on this host (no network faults)"))
    out.append(_row("backend", "netns", netns, "a network namespace per node on a bridge"))
    out.append(_row("backend", "docker", docker, "a container per node (engine answers)"))
    ssh = None if importlib.util.find_spec("paramiko") else "the ssh backend needs paramiko; pip install paramiko"
    out.append(_row("backend", "ssh", ssh, "a host per node over SSH; check the hosts with chaos doctor --hosts FILE"))
    slurm = None if shutil.which("sbatch") and shutil.which("srun") else \
        "Slurm's client tools are not here (apt-get install slurm-client, or run chaos on a login node)"
    out.append(_row("backend", "slurm", slurm, "sbatch/srun are here; check the cluster with chaos doctor --slurm"))

    no_net = None if (netns is None or docker is None) else "needs backend netns or docker; neither works here"
    out.append(_mechanism("delay", no_net, [
        (netem_ok, "netem", netem_why),
        (ipt_ok and nfq is None, "NFQUEUE userspace delayer (no netem)", ipt_why or nfq or ""),
    ]))
    out.append(_mechanism("loss", no_net, [
        (netem_ok, "netem loss", netem_why),
        (ipt_ok, "iptables -m statistic (no netem)", ipt_why),
    ]))
    out.append(_row("fault", "bandwidth", no_net or tbf, "tc tbf"))
    out.append(_row("fault", "partition", no_net or (None if ipt_ok else ipt_why), "iptables DROP in our own chains"))
    out.append(_row("fault", "pause", None, "SIGSTOP/SIGCONT (docker: cgroup freezer)"))
    out.append(_row("fault", "kill, node-crash, node-restart", None, "signals; docker kill/start"))
    out.append(_row("fault", "disk (stall, slow, error)", CAPABILITIES["fuse"](),
                    "a FUSE pass-through filesystem over the checkpoint directory"))
    out.append(_row("fault", "checkpoint (corrupt, truncate, delete-metadata)", None, "files edited on disk"))
    out.append(_row("fault", "gradient, parameter (SDC)", None, "in the probe, inside the target"))
    return out + gpu_findings(gpu_info())


NO_CUDA_MEANS = "gpu-hang and gpu-slow run on CPU as host stalls; NCCL's watchdog cases need CUDA"


def gpu_findings(info: GpuInfo) -> list[Finding]:
    """The ``gpu`` rows of :func:`findings`: devices, versions, and how each GPU fault runs here."""
    n, why = len(info.devices), info.why_no_cuda
    versions = (f"torch {info.torch}, CUDA {info.cuda or 'none (CPU build)'}, driver {info.driver or 'unknown'}, "
                f"NCCL {info.nccl or 'none'}")
    host = f"no CUDA device: {NO_CUDA_MEANS}" if why else ""
    out = [
        _row("gpu", "CUDA devices", None if n else f"no CUDA device: {why}; {NO_CUDA_MEANS}",
             "; ".join(f"cuda:{g.index} {g.name} (sm {g.capability}, {g.memory_gib:g} GiB)" for g in info.devices)),
        Finding("gpu", "torch, CUDA, driver, NCCL", "ok" if info.cuda else "missing", versions),
        Finding("gpu", "gpu-hang, gpu-slow", "fallback" if why else "ok",
                host or "torch.cuda._sleep on the rank's current stream (cycles from the device's clock)"),
        _row("gpu", "comm-abort", None, "aborts the rank's default process group (gloo, or NCCL's communicators)"),
        _row("gpu", "gil-hang", None, "a Python thread holds the GIL (NCCL's watchdog, a C++ thread, still runs)"),
        _row("gpu", "NCCL watchdog, flight recorder", None if n and info.nccl else
             (host or "this torch carries no NCCL"), "single-rank NCCL jobs can trip the watchdog (a hung kernel "
             "before a collective)"),
    ]
    if n >= 2 and info.nccl:
        out.append(Finding("gpu", "multi-rank NCCL", "ok", f"{n} GPUs: one NCCL rank per GPU"))
    elif n == 1:
        out.append(Finding("gpu", "multi-rank NCCL", "fallback", "one GPU: NCCL refuses two ranks on one device; "
                           "multi-rank jobs use gloo over CUDA tensors"))
    else:
        out.append(Finding("gpu", "multi-rank NCCL", "missing", host or "this torch carries no NCCL"))
    return out


def _mechanism(fault: str, no_backend: str | None, choices: list[tuple[bool, str, str]]) -> Finding:
    """The first mechanism that works, in order of preference: ``ok`` for the first, ``fallback`` after."""
    if no_backend:
        return Finding("fault", fault, "missing", no_backend)
    for i, (works, what, _why) in enumerate(choices):
        if works:
            return Finding("fault", fault, "ok" if i == 0 else "fallback", what)
    return Finding("fault", fault, "missing", "; ".join(why for _, _, why in choices if why))


def _iptables_flavour() -> str | None:
    path = shutil.which("iptables")
    if path is None:
        return None
    real = os.path.realpath(path)
    return "nf_tables" if "nft" in real else "legacy" if "legacy" in real else os.path.basename(real)
