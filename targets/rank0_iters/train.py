"""A character-level trainer in the shape of many real scripts (nanoGPT-like), as a black-box target.

- runs from its own directory: reads ``config.json`` and ``data/input.txt`` from the working
  directory (falling back to this file's directory when the working directory has none);
- counts iterations; only rank 0 (the master) prints, ``iter N: loss L`` after iteration N;
- every ``save_interval`` iterations the master writes ``ckpt.pt`` in the working directory
  atomically (temporary file, fsync, ``os.replace``) holding ``iter_num`` = N + 1 (the next
  iteration to run), then prints ``saving checkpoint to ckpt.pt`` — a line without a number: the
  iteration it holds is the one on the ``iter N`` line before it (a scenario reads it with
  ``saved_means: done``);
- on start, every rank resumes from ``ckpt.pt`` if it exists.

Deliberately broken variants (``--broken``): ``redo`` resumes at ``iter_num - 1`` (trains the saved
iteration again); ``restart`` loads the weights but starts counting at 0. ``--save-delay-ms`` sleeps
inside the write, ``--line-delay-ms`` between the write and the line; ``--max-iters`` /
``--save-interval`` override the config file.

Run by hand (from this directory): ``torchrun --standalone --nproc-per-node 2 train.py``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = Path(__file__).resolve().parent


def find(name: str) -> Path:
    """``name`` in the working directory, else next to this script."""
    return Path(name) if Path(name).exists() else HERE / name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="a tiny nanoGPT-shaped DDP trainer; rank 0 logs")
    ap.add_argument("--config", default="config.json")
    ap.add_argument("--max-iters", type=int, default=None)
    ap.add_argument("--save-interval", type=int, default=None)
    ap.add_argument("--save-delay-ms", type=float, default=0.0, help="sleep inside each write, ms")
    ap.add_argument("--line-delay-ms", type=float, default=0.0,
                    help="sleep between a write finishing and the 'saving checkpoint' line, ms")
    ap.add_argument("--broken", choices=["redo", "restart"], default=None)
    return ap.parse_args(argv)


class Bigram(nn.Module):
    def __init__(self, vocab: int, n_embd: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, n_embd)
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.emb(idx))
        return nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main(args: argparse.Namespace) -> None:
    cfg = json.loads(find(args.config).read_text())
    max_iters = args.max_iters if args.max_iters is not None else int(cfg["max_iters"])
    save_interval = args.save_interval if args.save_interval is not None else int(cfg["save_interval"])
    text = find("data").joinpath("input.txt").read_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    master = rank == 0
    torch.manual_seed(cfg["seed"])
    model = Bigram(len(chars), cfg["n_embd"])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"])
    iter_num = 0
    if os.path.exists("ckpt.pt"):
        ckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        iter_num = {"redo": ckpt["iter_num"] - 1, "restart": 0}.get(args.broken or "", ckpt["iter_num"])
        if master:
            print(f"resuming from ckpt.pt at iter {iter_num}", flush=True)
    ddp = DDP(model)
    bs, block = cfg["batch_size"], cfg["block_size"]
    while iter_num < max_iters:
        gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + iter_num * 10 + rank)
        ix = torch.randint(len(data) - block - 1, (bs,), generator=gen)
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        opt.zero_grad(set_to_none=True)
        loss = ddp(x, y)
        loss.backward()
        opt.step()
        time.sleep(cfg["iter_ms"] / 1000)
        if master:
            print(f"iter {iter_num}: loss {loss.item():.4f}", flush=True)
            if (iter_num + 1) % save_interval == 0:
                state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": iter_num + 1,
                         "config": cfg}
                with open("ckpt.pt.tmp", "wb") as f:
                    torch.save(state, f)
                    f.flush()
                    time.sleep(args.save_delay_ms / 1000)
                    os.fsync(f.fileno())
                os.replace("ckpt.pt.tmp", "ckpt.pt")
                time.sleep(args.line_delay_ms / 1000)
                print("saving checkpoint to ckpt.pt", flush=True)
        iter_num += 1
    dist.barrier()
    # drop the DDP model before tearing gloo down (its reducer holds the process group in a reference cycle;
    # left to the interpreter's exit, gloo's threads can abort a finished rank on torch 2.13 CPU)
    del ddp, model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_args())
