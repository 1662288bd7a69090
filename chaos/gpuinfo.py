"""What this machine offers a GPU job: CUDA devices, driver, CUDA and NCCL versions (``chaos doctor``'s GPU rows).

Asked of the installed torch (its CUDA runtime, devices and NCCL) and of ``nvidia-smi`` (the driver,
which torch does not report). Nothing is started on a device beyond what ``torch.cuda`` does to count and
name the devices.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    """One CUDA device as torch sees it: ``memory_gib`` in GiB, ``capability`` as ``major.minor``."""

    index: int
    name: str
    capability: str
    memory_gib: float


@dataclass(frozen=True)
class GpuInfo:
    """The GPU facts of this machine. ``why_no_cuda`` is None when a CUDA device is usable, else the reason;
    ``cuda`` is the CUDA runtime torch was built with (None: a CPU build); ``driver`` the NVIDIA driver's
    version (None: unknown, e.g. no ``nvidia-smi``); ``nccl`` NCCL's version as torch carries it (None: none)."""

    torch: str
    cuda: str | None
    devices: tuple[Gpu, ...]
    driver: str | None
    nccl: str | None
    why_no_cuda: str | None


def _smi(field: str) -> list[str]:
    """One ``nvidia-smi --query-gpu`` field per GPU, in nvidia-smi's order (empty: no nvidia-smi, no GPU, or
    it failed)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def _driver() -> str | None:
    versions = sorted(set(_smi("driver_version")))
    return ", ".join(versions) if versions else None


@functools.cache
def gpu_models() -> tuple[str, ...]:
    """The model name of each NVIDIA GPU of this machine, as ``nvidia-smi`` lists them (empty: none, or no
    ``nvidia-smi``). Starts no CUDA context in this process (a reference run's cache key holds it: the
    same deterministic CUDA job is bitwise the same only on the same GPU type)."""
    return tuple(_smi("name"))


def _nccl() -> str | None:
    import torch

    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):  # a CPU build has no NCCL in it
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def gpu_info() -> GpuInfo:
    """Ask torch and the driver (a second or two: it initializes CUDA when torch has it).

    Raises nothing: a missing torch is reported in ``why_no_cuda``."""
    try:
        import torch
    except ImportError:
        return GpuInfo("not installed", None, (), _driver(), None, "torch is not installed")
    cuda = torch.version.cuda
    if cuda is None:
        return GpuInfo(torch.__version__, None, (), _driver(), None,
                       f"torch {torch.__version__} is a CPU build (no CUDA runtime): install a CUDA build of torch")
    devices: list[Gpu] = []
    why: str | None = None
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                devices.append(Gpu(i, props.name, f"{props.major}.{props.minor}", round(props.total_memory / 2**30, 1)))
    except RuntimeError as exc:
        why = f"CUDA does not start: {exc}"[:300]
    if not devices and why is None:
        why = ("no CUDA device is visible (torch.cuda.is_available() is False: no NVIDIA driver or device, or "
               "CUDA_VISIBLE_DEVICES hides them)")
    return GpuInfo(torch.__version__, cuda, tuple(devices), _driver(), _nccl(), why)
