"""An epoch trainer that saves ``EPOCHS_RUN = epoch + 1`` — the next epoch to run — as a black-box target.

The shape of many DDP scripts: every rank prints ``[rank R] epoch E | loss L`` at the end of each
epoch; rank 0 then writes ``snapshot.pt`` (model, optimizer, ``EPOCHS_RUN``) atomically (a temporary
file, fsync, ``os.replace``) and prints ``snapshot saved: EPOCHS_RUN=E+1``, the number of the *next*
epoch (a scenario reads it with ``saved_means: next``). On start every rank loads the snapshot if it
exists and resumes at ``EPOCHS_RUN``.

``--broken redo`` resumes at ``EPOCHS_RUN - 1``: it trains the saved epoch a second time (the
off-by-one of scripts that store ``epoch`` and resume at it). ``--save-delay-ms`` sleeps inside the
write (a slow filesystem); ``--line-delay-ms`` sleeps between the write finishing and the saved line
(so that a fault can land between them). ``--timeout-s`` is the process group's collective timeout.

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/epoch_runs.py --epochs 4``
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="a tiny DDP epoch trainer that saves EPOCHS_RUN = epoch + 1")
    ap.add_argument("--epochs", type=int, default=6, help="epochs to train (0 .. epochs-1)")
    ap.add_argument("--batches", type=int, default=4, help="batches per epoch on each rank")
    ap.add_argument("--batch-ms", type=float, default=60.0, help="extra time each batch takes, ms")
    ap.add_argument("--snapshot", default="snapshot.pt", help="where the snapshot is saved and loaded from")
    ap.add_argument("--save-delay-ms", type=float, default=0.0, help="sleep inside each write, ms")
    ap.add_argument("--line-delay-ms", type=float, default=0.0,
                    help="sleep between a write finishing and the 'snapshot saved' line, ms")
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="the process group's collective timeout, s")
    ap.add_argument("--broken", choices=["redo"], default=None, help="resume at EPOCHS_RUN - 1 (redo the saved epoch)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def save(state: dict, path: str, delay_ms: float) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        time.sleep(delay_ms / 1000)
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(args.snapshot):
        snap = torch.load(args.snapshot, map_location="cpu", weights_only=False)
        model.load_state_dict(snap["MODEL_STATE"])
        opt.load_state_dict(snap["OPTIMIZER_STATE"])
        start = snap["EPOCHS_RUN"] - (1 if args.broken == "redo" else 0)
        print(f"[rank {rank}] resuming from {args.snapshot} at epoch {start}", flush=True)
    ddp = DDP(model)
    gen = torch.Generator().manual_seed(args.seed + rank)
    data = [(torch.rand(16, 8, generator=gen), torch.rand(16, 1, generator=gen)) for _ in range(args.batches)]
    for epoch in range(start, args.epochs):
        loss = torch.zeros(())
        for x, y in data:
            opt.zero_grad()
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            time.sleep(args.batch_ms / 1000)
        print(f"[rank {rank}] epoch {epoch} | loss {loss.item():.5f} | world {world}", flush=True)
        if rank == 0:
            save({"MODEL_STATE": model.state_dict(), "OPTIMIZER_STATE": opt.state_dict(), "EPOCHS_RUN": epoch + 1},
                 args.snapshot, args.save_delay_ms)
            time.sleep(args.line_delay_ms / 1000)
            print(f"snapshot saved: EPOCHS_RUN={epoch + 1}", flush=True)
    dist.barrier()
    # drop the DDP model before tearing gloo down: its reducer holds the process group in a reference
    # cycle, and left to the interpreter's exit gloo's threads are destroyed while still joinable, which
    # aborts a finished rank ("terminate called without an active exception"; 3 runs in 48, 0 in 60 after)
    del ddp
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_args())
