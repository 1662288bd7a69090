"""A small data-parallel regression job whose replicas must stay identical (DDP, gloo on CPU).

Every rank holds a full copy of the model; DDP averages the gradients, so after each step every
replica's parameters are bitwise equal — unless the script itself treats one rank differently.

Deliberately broken mode, for testing ``replicas_agree`` (``--broken``):
  scheduler-on-rank0  the learning-rate scheduler is stepped inside the ``if rank == 0:`` logging
                      block, so only rank 0's learning rate decays: the replicas drift apart from
                      step 2 on, silently (no NaN, no error), the same way in every run

Checkpoints: rank 0 saves ``ckpt.pt`` every ``--checkpoint-every`` steps (write ``.tmp``, rename);
every rank resumes from it.

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/ddp_replicas.py --checkpoint-dir /tmp/ck``
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from chaos import probe


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--broken", choices=["scheduler-on-rank0"], default=None)
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    p = probe.get()
    torch.manual_seed(args.seed)
    x = torch.randn(512, 16)
    y = x @ torch.randn(16, 1) + 0.1 * torch.randn(512, 1)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.97 ** s)

    ckpt = os.path.join(args.checkpoint_dir, "ckpt.pt")
    step = 0
    if os.path.exists(ckpt):
        p.checkpoint_load_begin(ckpt)
        with open(ckpt, "rb") as f:
            raw = f.read()
        state = torch.load(ckpt, weights_only=False)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step = state["step"]
        p.checkpoint_loaded(step, ckpt, probe.bytes_digest(raw))

    epoch = 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if step >= args.steps:
                break
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            if args.broken is None:
                sched.step()
            step += 1
            if rank == 0:
                print(f"step {step} loss {loss.item():.5f}", flush=True)
                if args.broken == "scheduler-on-rank0":
                    sched.step()
            p.step(step, loss=loss.item(), params=model.parameters() if step % 5 == 0 else None)
            if step % args.checkpoint_every == 0 and rank == 0:
                tmp = ckpt + ".tmp"
                p.checkpoint_save_begin(step, ckpt)
                torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                            "scheduler": sched.state_dict(), "step": step}, tmp)
                os.replace(tmp, ckpt)
                with open(ckpt, "rb") as f:
                    p.checkpoint_saved(step, ckpt, probe.bytes_digest(f.read()))
        epoch += 1

    p.emit("final", step=step, digest=probe.param_digest(model.parameters()))
    dist.barrier()
    dist.destroy_process_group()
    p.exit()
    sys.stdout.flush()
    os._exit(0)  # skip gloo's C++ teardown, which can abort a finished worker on torch 2.13 CPU


if __name__ == "__main__":
    main()
