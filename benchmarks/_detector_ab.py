"""Worker of ``benchmarks.detector_overhead``'s alternating-blocks measurement (run by torchrun, 2 ranks).

Three copies of ``targets/digits_ddp.py``'s model, each wrapped in DDP, trained in turn in blocks of
``BLOCK_STEPS`` steps, so that all three see the same machine load: ``none`` (no detectors),
``gathered`` (the default detectors, ``SdcDetectors``'s default: per-parameter hooks and one
``all_gather`` per step) and ``fused`` (``fused=True``: the numbers ride in the gradient
all-reduce). Rank 0 prints one JSON line: per block, the seconds per step of each configuration.

Run: ``torchrun --standalone --nproc-per-node 2 benchmarks/_detector_ab.py ROUNDS``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "targets"))

from digits_ddp import build_model  # noqa: E402

from chaos.probe import Probe  # noqa: E402
from chaos.probe.detectors import SdcDetectors  # noqa: E402

BLOCK_STEPS = 100
WARMUP_ROUNDS = 2  # rounds not reported (the spike detector's warm-up is 50 steps)
CONFIGS = ("none", "gathered", "fused")


def main() -> None:
    rounds = int(sys.argv[1])
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch._C._set_deterministic_algorithms(True)
    rank = dist.get_rank()
    probe = Probe({})  # disabled: no events
    jobs = {}
    for name in CONFIGS:
        torch.manual_seed(0)
        model = DistributedDataParallel(build_model())
        det = None if name == "none" else SdcDetectors(probe, model, fused=name == "fused")
        jobs[name] = (model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), det)
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.rand(32, 64, generator=gen), torch.randint(0, 10, (32,), generator=gen)
    loss_fn = torch.nn.CrossEntropyLoss()
    out: dict[str, list[float]] = {n: [] for n in CONFIGS}
    step = 0
    for rnd in range(rounds + WARMUP_ROUNDS):
        for name, (model, opt, det) in jobs.items():
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(BLOCK_STEPS):
                step += 1
                if det is not None:
                    det.begin_step(step)
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                if det is not None:
                    det.before_backward(loss)
                loss.backward()
                if det is not None:
                    det.check_gradients(loss)
                opt.step()
                if det is not None:
                    det.check_replicas()
            if rnd >= WARMUP_ROUNDS:
                out[name].append((time.perf_counter() - t0) / BLOCK_STEPS)
    if rank == 0:
        print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # skip the interpreter's teardown, as the target does (gloo can abort in its destructors)


if __name__ == "__main__":
    main()
