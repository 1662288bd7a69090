"""A DDP trainer whose checkpoint writer is chosen by rank, as a black-box target (it imports nothing of chaos).

The shape of many scripts: every rank trains; rank 0 prints ``epoch E | loss L``; after each epoch the
saving rank serialises the model and optimizer (``torch.save`` into memory) and writes ``snapshot.pt``
in place, in ``--chunks`` pieces with ``--chunk-ms`` between them (a slow shared filesystem: by default
the file is open for writing about half a second), then prints ``saved snapshot.pt (epoch E)``.

``--broken local-rank-saves`` picks the saver with ``LOCAL_RANK == 0`` — one rank per node — instead
of ``RANK == 0``: on two nodes that share the working directory, both nodes' first ranks write the same
``snapshot.pt`` at once (the ranks leave the epoch's last all-reduce together), and the file can end up a
mix of both writes.

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/two_writers.py --epochs 3``
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="a tiny DDP trainer that saves snapshot.pt from the rank it picks")
    ap.add_argument("--epochs", type=int, default=3, help="epochs to train (0 .. epochs-1)")
    ap.add_argument("--batches", type=int, default=4, help="batches per epoch on each rank")
    ap.add_argument("--snapshot", default="snapshot.pt", help="where the snapshot is saved and loaded from")
    ap.add_argument("--chunks", type=int, default=8, help="pieces each save is written in")
    ap.add_argument("--chunk-ms", type=float, default=60.0, help="sleep after each piece of a save, ms")
    ap.add_argument("--broken", choices=["local-rank-saves"], default=None,
                    help="save on LOCAL_RANK == 0 (every node's first rank) instead of RANK == 0")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def save(state: dict, path: str, chunks: int, chunk_s: float) -> None:
    """``torch.save(state)`` into memory, then written to ``path`` in place, ``chunks`` pieces, slowly."""
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    size = -(-len(data) // max(1, chunks))
    with open(path, "wb") as f:
        for start in range(0, len(data), size):
            f.write(data[start:start + size])
            f.flush()
            time.sleep(chunk_s)
        os.fsync(f.fileno())


def main(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(args.snapshot):
        snap = torch.load(args.snapshot, map_location="cpu", weights_only=False)
        model.load_state_dict(snap["model"])
        opt.load_state_dict(snap["optimizer"])
        start = snap["epoch"] + 1
        print(f"[rank {rank}] resuming from {args.snapshot} at epoch {start}", flush=True)
    ddp = DDP(model)
    gen = torch.Generator().manual_seed(args.seed + rank)
    data = [(torch.rand(16, 8, generator=gen), torch.rand(16, 1, generator=gen)) for _ in range(args.batches)]
    saver = local_rank == 0 if args.broken == "local-rank-saves" else rank == 0
    for epoch in range(start, args.epochs):
        loss = torch.zeros(())
        for x, y in data:
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} | loss {loss.item():.5f}", flush=True)
        if saver:
            save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}, args.snapshot,
                 args.chunks, args.chunk_ms / 1000)
            print(f"saved {args.snapshot} (epoch {epoch})", flush=True)
        dist.barrier()  # the next epoch begins when the save is done
    # drop the DDP model before tearing gloo down: its reducer holds the process group in a reference
    # cycle, and left to the interpreter's exit gloo's threads are destroyed while still joinable, which
    # aborts a finished rank ("terminate called without an active exception"; 3 runs in 48, 0 in 60 after)
    del ddp
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_args())
