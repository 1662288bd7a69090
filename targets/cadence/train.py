"""A DDP trainer in the commonest shape of a real script, as a black-box target: rank 0 logs every k
steps, saves atomically every S steps, and resumes from the newest checkpoint.

- steps are numbered 1..``--steps``; after step N rank 0 prints ``step N loss L`` when N % k == 0
  (``--log-every k``; ``--style nanogpt``: ``iter N: loss L``) — the step just done;
- ``--eval-every E``: before running step N, when (N-1) % E == 0, rank 0 prints nanoGPT's eval line
  ``step N: train loss X, val loss Y`` — the step about to run;
- every ``--save-every`` steps rank 0 writes ``<ckpt-dir>/step_{N:06d}.pt`` atomically (a temporary
  file in the same directory, written in chunks over ``--save-delay-ms``, fsync, ``os.replace``),
  keeps the newest 2, and prints ``saved checkpoint at step N`` after the write (``--save-line
  before``: ``saving checkpoint at step N`` as the write begins);
- on start every rank loads the newest checkpoint: ``--resume done`` stores ``step`` = N and resumes at
  step + 1, ``--resume next`` stores ``next_step`` = N + 1 and resumes at it (both correct);
  ``--resume-line``: rank 0 prints ``resumed from step M`` (M the stored value).

Deliberately broken (``--broken``): ``scratch`` ignores the checkpoint; ``skip`` resumes a whole print
interval (k steps) late; ``older`` resumes from the second-newest checkpoint file.

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/cadence/train.py --steps 60``
"""

from __future__ import annotations

import argparse
import gc
import glob
import io
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="a tiny DDP trainer that logs every k steps and saves every S")
    ap.add_argument("--steps", type=int, default=60, help="steps to train (numbered 1..steps)")
    ap.add_argument("--log-every", type=int, default=10, help="rank 0 prints a progress line every k steps")
    ap.add_argument("--eval-every", type=int, default=0, help="print an eval line before every E-th step (0: none)")
    ap.add_argument("--style", choices=["plain", "nanogpt"], default="plain", help="nanogpt: 'iter N: loss L'")
    ap.add_argument("--save-every", type=int, default=20, help="steps between checkpoints")
    ap.add_argument("--save-line", choices=["after", "before"], default="after", help="print the save line "
                    "after the write ('saved ...') or as it begins ('saving ...')")
    ap.add_argument("--save-delay-ms", type=float, default=0.0, help="time one write takes, ms (in chunks)")
    ap.add_argument("--ckpt-dir", default="ckpts", help="where checkpoints go (relative: to the working directory)")
    ap.add_argument("--resume", choices=["done", "next"], default="done", help="store the step done or the next")
    ap.add_argument("--resume-line", action="store_true", help="print 'resumed from step M' on load")
    ap.add_argument("--broken", choices=["scratch", "skip", "older"], default=None)
    ap.add_argument("--step-ms", type=float, default=100.0, help="extra time each step takes, ms")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def save(state: dict, path: str, delay_ms: float, chunks: int = 8) -> None:
    """Write ``state`` to ``path`` atomically: a temporary file beside it, in ``chunks`` pieces spread over
    ``delay_ms`` (so that a kill can land mid-write), fsync, then ``os.replace``."""
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    size = -(-len(data) // chunks)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for i in range(0, len(data), size):
            f.write(data[i:i + size])
            f.flush()
            time.sleep(delay_ms / 1000 / chunks)
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in sorted(glob.glob(os.path.join(os.path.dirname(path), "step_*.pt")))[:-2]:
        os.remove(old)  # keep the newest 2


def load(args: argparse.Namespace) -> dict | None:
    """The checkpoint to resume from (None: start from step 1)."""
    files = sorted(glob.glob(os.path.join(args.ckpt_dir, "step_*.pt")))
    if not files or args.broken == "scratch":
        return None
    path = files[-2] if args.broken == "older" and len(files) > 1 else files[-1]
    return torch.load(path, map_location="cpu", weights_only=False)


def batch(step: int, rank: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed * 100_003 + step * 17 + rank)
    x = torch.rand(16, 8, generator=gen)
    return x, x.sum(dim=1, keepdim=True) * 0.1


def main(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 1
    ckpt = load(args)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        stored = ckpt["step"] if args.resume == "done" else ckpt["next_step"]
        start = stored + 1 if args.resume == "done" else stored
        if args.broken == "skip":
            start += args.log_every
        if rank == 0 and args.resume_line:
            print(f"resumed from step {stored}", flush=True)
    ddp = DDP(model)
    val = batch(0, 0, args.seed + 1)
    if rank == 0:
        os.makedirs(args.ckpt_dir, exist_ok=True)
    for step in range(start, args.steps + 1):
        x, y = batch(step, rank, args.seed)
        if rank == 0 and args.eval_every and (step - 1) % args.eval_every == 0:
            with torch.no_grad():
                train, held = nn.functional.mse_loss(model(x), y), nn.functional.mse_loss(model(val[0]), val[1])
            print(f"step {step}: train loss {train.item():.4f}, val loss {held.item():.4f}", flush=True)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        time.sleep(args.step_ms / 1000)
        if rank == 0 and step % args.log_every == 0:
            text = f"iter {step}: loss" if args.style == "nanogpt" else f"step {step} loss"
            print(f"{text} {loss.item():.5f}", flush=True)
        if rank == 0 and step % args.save_every == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(),
                     **({"step": step} if args.resume == "done" else {"next_step": step + 1})}
            if args.save_line == "before":
                print(f"saving checkpoint at step {step}", flush=True)
            save(state, os.path.join(args.ckpt_dir, f"step_{step:06d}.pt"), args.save_delay_ms)
            if args.save_line == "after":
                print(f"saved checkpoint at step {step}", flush=True)
    dist.barrier()
    # drop the DDP model before tearing gloo down (its reducer holds the process group in a reference
    # cycle; left to the interpreter's exit, gloo on torch 2.13 CPU can abort a finished rank)
    del ddp
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_args())
