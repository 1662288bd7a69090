"""A small DDP trainer in the shape most scripts have, instrumented with the probe: it keeps one
``snapshot.pt`` (the same path every save, rewritten in place of the last one), logs on rank 0,
and keeps torch's default collective timeout unless ``--timeout-s`` is given.

Data: a fixed synthetic regression set (seeded), so it needs nothing but torch. Deterministic.

Deliberately broken modes, for testing the checks themselves (``--broken``, repeatable):
  non-atomic-save   rewrite snapshot.pt in place (a kill mid-write leaves a torn file)
  makedirs-no-exist rank 0 creates ``<checkpoint-dir>/runs`` without ``exist_ok``: a restarted job
                    fails with FileExistsError on rank 0 and its peers then fail on the lost connection
  local-rank-saves  every node's ``local_rank == 0`` saves: two nodes sharing the checkpoint
                    directory write snapshot.pt at once

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/snapshot_ddp.py --checkpoint-dir /tmp/ck``
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from chaos import probe

BROKEN_MODES = ("non-atomic-save", "makedirs-no-exist", "local-rank-saves")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--timeout-s", type=float, default=None,
                    help="collective timeout, seconds (default: none passed, torch's own 30 min)")
    ap.add_argument("--broken", action="append", default=[], choices=BROKEN_MODES)
    return ap.parse_args(argv)


def save(state: dict, path: str, step: int, atomic: bool, p: probe.Probe) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    p.checkpoint_save_begin(step, path, bytes=len(data))
    tmp = f"{path}.tmp" if atomic else path
    with open(tmp, "wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        p.checkpoint_write(step, path, bytes_written=len(data) // 2)
        f.write(data[len(data) // 2:])
        f.flush()
        os.fsync(f.fileno())
    if atomic:
        os.replace(tmp, path)
    p.checkpoint_saved(step, path, probe.bytes_digest(data), bytes=len(data))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    p = probe.get()
    extra = {"timeout": timedelta(seconds=args.timeout_s)} if args.timeout_s else {}
    dist.init_process_group("gloo", **extra)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.set_num_threads(1)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    if rank == 0 and "makedirs-no-exist" in args.broken:
        os.makedirs(os.path.join(args.checkpoint_dir, "runs"))  # the bug: no exist_ok, fails on a restart
    dist.barrier()

    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(512, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(512, 1, generator=g)
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    path = os.path.join(args.checkpoint_dir, "snapshot.pt")

    step = 0
    if os.path.exists(path):
        p.checkpoint_load_begin(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
            state = torch.load(io.BytesIO(data), weights_only=False)
        except Exception as exc:
            p.checkpoint_load_failed(path, f"{type(exc).__name__}: {exc}")
            raise
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        p.checkpoint_loaded(step, path, probe.bytes_digest(data))
        if rank == 0:
            print(f"resumed from {path} at step {step}", flush=True)

    batch = 512 // world // 4
    while step < args.steps:
        step += 1
        i = ((step - 1) % 4) * batch * world + rank * batch
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x[i:i + batch]), y[i:i + batch])
        loss.backward()
        opt.step()
        p.step(step, loss=loss.item(), params=model.parameters() if step % 10 == 0 else None)
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        saver = local_rank == 0 if "local-rank-saves" in args.broken else rank == 0
        if step % args.checkpoint_every == 0 and saver:
            save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}, path, step,
                 "non-atomic-save" not in args.broken, p)
    p.emit("final", step=step, digest=probe.param_digest(model.parameters()))
    dist.barrier()
    dist.destroy_process_group()
    p.exit()
    sys.stdout.flush()
    os._exit(0)  # skip the C++ teardown (see digits_ddp.py: gloo can abort in its destructors)


if __name__ == "__main__":
    main()
