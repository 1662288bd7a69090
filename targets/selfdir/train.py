"""A trainer in the shape of a user's own script: it lives in its own directory and works relative to it.

Reads ``data/x.txt`` and ``config/train.json`` and writes ``snapshot.pt`` relative to its working
directory (``cd`` into its directory, then ``torchrun --nproc-per-node 2 train.py``), imports a local
module (``selfdir_helpers``), and resumes from ``snapshot.pt`` when it exists. DDP on gloo, a linear
regression, deterministic. It reports to chaos through the probe (a no-op outside a chaos run).

With ``target.cwd: script`` chaos runs it in its own directory; with the default (the run
directory) it cannot find ``data/x.txt`` and says so (FileNotFoundError). It prints the interpreter
it runs in (``python: …``), so a test can see that ``target.python`` is what ran it.
"""

from __future__ import annotations

import gc
import io
import json
import os
import sys

import torch
import torch.distributed as dist
from selfdir_helpers import loss_of
from torch.nn.parallel import DistributedDataParallel

from chaos import probe

SNAPSHOT = "snapshot.pt"


def load_data(path: str) -> tuple[torch.Tensor, torch.Tensor]:
    with open(path) as f:
        rows = [[float(v) for v in line.split()] for line in f if line.strip() and not line.startswith("#")]
    data = torch.tensor(rows)
    return data[:, :4], data[:, 4:]


def main() -> None:
    p = probe.get()
    with open("config/train.json") as f:
        config = json.load(f)
    x, y = load_data("data/x.txt")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    if rank == 0:
        print(f"python: {sys.executable}", flush=True)
    start = 0
    if os.path.exists(SNAPSHOT):
        with open(SNAPSHOT, "rb") as f:
            data = f.read()
        state = torch.load(io.BytesIO(data))
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        p.checkpoint_loaded(start, os.path.abspath(SNAPSHOT), probe.bytes_digest(data), world_size=world)
    batch = config["batch_size"]
    for step in range(start + 1, config["steps"] + 1):
        i = ((step - 1) * batch * world + rank * batch) % len(x)
        loss = loss_of(model(x[i:i + batch]), y[i:i + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        p.step(step, loss=loss.item(), params=model.parameters())
        print(f"step {step} loss {loss.item():.5f}", flush=True)
        if step % config["save_every"] == 0 and rank == 0:
            buf = io.BytesIO()
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}, buf)
            blob = buf.getvalue()
            p.checkpoint_save_begin(step, os.path.abspath(SNAPSHOT), bytes=len(blob))
            with open(SNAPSHOT + ".tmp", "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(SNAPSHOT + ".tmp", SNAPSHOT)
            p.checkpoint_saved(step, os.path.abspath(SNAPSHOT), probe.bytes_digest(blob), bytes=len(blob))
        dist.barrier()
    p.emit("final", step=config["steps"], digest=probe.param_digest(model.parameters()))
    # drop the DDP model before tearing gloo down (its reducer holds the process group in a reference cycle;
    # left to the interpreter's exit, gloo's threads can abort a finished rank on torch 2.13 CPU)
    del model
    gc.collect()
    dist.destroy_process_group()
    p.exit()


if __name__ == "__main__":
    main()
