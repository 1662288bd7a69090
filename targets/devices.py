"""Where a bundled target computes and how its ranks talk: ``--device {cpu,cuda}`` and ``--backend {gloo,nccl}``.

``--device cpu`` (the default) is gloo on the host, exactly as before these flags existed: the same
calls, the same RNG state in the checkpoint (the CPU generator's), bitwise the same results.

``--device cuda`` puts each rank on GPU ``LOCAL_RANK`` (modulo the GPUs visible: several gloo ranks may
share one GPU, NCCL ranks may not) and makes it deterministic where the hardware allows:
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` set before CUDA starts (unless the job's environment sets it),
deterministic algorithms (the caller's ``torch._C._set_deterministic_algorithms(True)``: an op without a
deterministic CUDA kernel raises rather than vary), cuDNN's autotuner off and TF32 off. A run and its
reference on the same GPU type then end bitwise equal. Dropout draws from the GPU's generator there, so
the RNG state a checkpoint keeps is the pair (CPU generator, this GPU's generator).

``--backend nccl`` needs ``--device cuda`` (NCCL carries only CUDA tensors): asked for without it the
arguments are refused (exit 2); ``--device cuda`` on a machine without a CUDA device, or NCCL with more
ranks on a node than GPUs (NCCL refuses two ranks on one GPU), exits at start (exit 1), saying why.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

DEVICES = ("cpu", "cuda")
BACKENDS = ("gloo", "nccl")
CUBLAS_WORKSPACE = ":4096:8"  # one of the two settings cuBLAS is deterministic with


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``--device`` and ``--backend`` on a target's parser."""
    ap.add_argument("--device", choices=DEVICES, default="cpu",
                    help="cpu (default) or cuda: GPU LOCAL_RANK, deterministic kernels")
    ap.add_argument("--backend", choices=BACKENDS, default="gloo",
                    help="gloo (default; CPU or CUDA tensors) or nccl (needs --device cuda)")


def checked(ap: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``args`` if the device and backend go together, else ``ap.error`` (exit 2, the message on stderr)."""
    if args.backend == "nccl" and args.device != "cuda":
        ap.error(f"--backend nccl needs --device cuda, not --device {args.device}: NCCL carries only CUDA "
                 "tensors; use --backend gloo on the CPU")
    return args


def why_no_cuda() -> str | None:
    """Why this process cannot use a CUDA device (None: it can)."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (no CUDA runtime)"
    if not torch.cuda.is_available():
        return (f"no CUDA device is visible (torch.cuda.is_available() is False; "
                f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')})")
    return None


def refuse(why: str) -> NoReturn:
    """Stop the job at start: ``<script>: error: <why>`` on stderr (as argparse words it, so the runner's
    ``completes`` verdict quotes it), then exit 1."""
    print(f"{os.path.basename(sys.argv[0])}: error: {why}", file=sys.stderr, flush=True)
    sys.exit(1)


def start(device: str, backend: str, timeout_s: float) -> torch.device:
    """Initialize the default process group with ``backend`` and a collective timeout of ``timeout_s``
    seconds; returns this rank's device. On CUDA: picks and sets the GPU, and turns off what varies.

    Exits 1 (:func:`refuse`, the reason on stderr) when CUDA is asked for and missing, or NCCL would put
    two ranks on one GPU."""
    timeout = timedelta(seconds=timeout_s)
    if device == "cpu":
        dist.init_process_group(backend, timeout=timeout)
        return torch.device("cpu")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # read when cuBLAS starts: before any CUDA work
    why = why_no_cuda()
    if why is not None:
        refuse(f"--device cuda: {why}; use --device cpu --backend gloo")
    count = torch.cuda.device_count()
    local_rank, local_world = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if backend == "nccl" and local_world > count:
        refuse(f"--backend nccl: {local_world} ranks on this node and {count} GPU(s); NCCL refuses two ranks on one "
               "GPU: use fewer ranks per node, or --backend gloo (CUDA tensors over gloo)")
    dev = torch.device("cuda", local_rank % count)
    torch.cuda.set_device(dev)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group(backend, timeout=timeout, device_id=dev if backend == "nccl" else None)
    return dev


def device_ids(device: torch.device) -> list[int] | None:
    """``DistributedDataParallel``'s ``device_ids`` for a model on ``device`` (None on the CPU)."""
    return None if device.type == "cpu" else [device.index if device.index is not None else torch.cuda.current_device()]


def to_device(data: TensorDataset, device: torch.device) -> TensorDataset:
    """``data`` with its tensors on ``device`` (the same object on the CPU)."""
    return data if device.type == "cpu" else TensorDataset(*(t.to(device) for t in data.tensors))


def rng_state(device: torch.device) -> Any:
    """What a checkpoint keeps of this rank's RNG: the CPU generator's state (a uint8 tensor), and on
    CUDA the pair (CPU generator's, this GPU's)."""
    cpu = torch.get_rng_state()
    return cpu if device.type == "cpu" else (cpu, torch.cuda.get_rng_state(device))


def set_rng_state(state: Any, device: torch.device) -> None:
    """Restore what :func:`rng_state` returned (a pair restores this GPU's generator too)."""
    if isinstance(state, (tuple, list)):
        torch.set_rng_state(state[0])
        if device.type == "cuda":
            torch.cuda.set_rng_state(state[1], device)
    else:
        torch.set_rng_state(state)
