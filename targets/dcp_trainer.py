"""A DDP trainer that checkpoints with torch.distributed.checkpoint (DCP): ``dcp.save`` or ``dcp.async_save``.

Plain DDP on gloo (CPU), launched by ``torchrun``. Every rank takes part in each save (DCP is
collective; replicated DDP tensors are written once, by rank 0), so a checkpoint is a directory::

    <dir>/step-000040/.metadata        DCP's pickled metadata, written last (renamed into place)
    <dir>/step-000040/__0_0.distcp     rank 0's shard (the tensors)
    <dir>/step-000040/__1_0.distcp     rank 1's shard (next to nothing: DDP replicas are deduplicated)
    <dir>/latest                       "step-000040": rank 0 moves it once the save has finished

The state is ``get_state_dict(model, optimizer)`` and the step (a tensor). ``--async-save`` writes with
``dcp.async_save`` on a process group of its own while training goes on; before the next save (and
before the end) the previous one is waited for, and only then ``latest`` moves. On start every rank
loads what ``latest`` names with ``dcp.load`` and ``set_state_dict``. The data of step ``s`` is drawn
from a generator seeded by ``(seed, s)`` and there is no dropout, so a run killed and restored ends
bitwise equal to a run with no faults at the same world size.

With the probe (default) it reports steps, saves and loads as events; ``--blackbox`` imports nothing
of chaos and prints lines instead::

    [rank0] step 12 loss 2.301234
    [rank0] saved checkpoint step-000040 (step 40)
    [rank0] resumed from step-000040 (step 40)

Deliberately broken modes (``--broken``):
  latest-before-save  rank 0 points ``latest`` at the new directory before it is written (async: as
                      soon as the save is launched): a crash then resumes from nothing
  no-load             resume ignores the checkpoints and starts over from step 0

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/dcp_trainer.py --checkpoint-dir /tmp/ck``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

BROKEN_MODES = ("latest-before-save", "no-load")
LATEST = "latest"
FEATURES, CLASSES, SAMPLES = 32, 10, 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="total optimizer steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--checkpoint-every", type=int, default=10, help="steps between saves")
    ap.add_argument("--keep", type=int, default=3, help="checkpoints kept on disk")
    ap.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    ap.add_argument("--width", type=int, default=256, help="hidden width (256: a ~0.6 MB shard)")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="collective timeout, seconds")
    ap.add_argument("--step-time-ms", type=float, default=0.0, help="pad every step to at least this long, ms")
    ap.add_argument("--async-save", action="store_true", help="save with dcp.async_save")
    ap.add_argument("--blackbox", action="store_true", help="no probe: print progress, save and resume lines")
    ap.add_argument("--broken", action="append", default=[], choices=BROKEN_MODES)
    return ap.parse_args(argv)


class Lines:
    """What the job says without the probe: lines on stdout (the probe's methods, as no-ops or prints)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def step(self, step: int, loss: float, params: Any = None) -> None:
        print(f"[rank{self.rank}] step {step} loss {loss:.6f}", flush=True)

    def checkpoint_save_begin(self, step: int, path: str, **fields: Any) -> None:
        pass

    def checkpoint_saved(self, step: int, path: str, digest: str, **fields: Any) -> None:
        if self.rank == 0:
            print(f"[rank0] saved checkpoint {os.path.basename(path)} (step {step})", flush=True)

    def checkpoint_load_begin(self, path: str, **fields: Any) -> None:
        pass

    def checkpoint_loaded(self, step: int, path: str, digest: str, **fields: Any) -> None:
        print(f"[rank{self.rank}] resumed from {os.path.basename(path)} (step {step})", flush=True)

    def checkpoint_load_failed(self, path: str, error: str, **fields: Any) -> None:
        print(f"[rank{self.rank}] cannot load {path}: {error}", file=sys.stderr, flush=True)

    def emit(self, kind: str, step: int | None = None, **fields: Any) -> None:
        pass

    def exit(self, status: str = "ok", **fields: Any) -> None:
        pass


def state_digest(model: nn.Module) -> str:
    """SHA-256 of the parameters (the probe's digest when there is one; the same on every rank)."""
    import hashlib

    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:06d}")


def point_latest(root: str, step: int) -> None:
    """Make ``latest`` name ``step-<step>`` (write, fsync, rename)."""
    tmp = os.path.join(root, LATEST + ".tmp")
    with open(tmp, "w") as f:
        f.write(os.path.basename(step_dir(root, step)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(root, LATEST))


def read_latest(root: str) -> str | None:
    try:
        with open(os.path.join(root, LATEST)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def rotate(root: str, keep: int) -> None:
    """Remove all but the newest ``keep`` checkpoint directories; never the one ``latest`` names."""
    import shutil

    latest = read_latest(root)
    names = sorted(n for n in os.listdir(root) if n.startswith("step-") and os.path.isdir(os.path.join(root, n)))
    for name in names[:-keep]:
        if name != latest:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def batch(seed: int, step: int, rank: int, world: int, size: int, data: tuple[torch.Tensor, torch.Tensor]
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s batch for ``rank``: the same whichever incarnation computes it."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randperm(SAMPLES, generator=g)[rank * size:(rank + 1) * size]
    return data[0][idx], data[1][idx]


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian inputs labelled by a fixed random linear teacher."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, CLASSES, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.blackbox:
        p: Any = Lines(rank)
        digest_of = state_digest
    else:
        from chaos import probe

        p = probe.get()

        def digest_of(model: nn.Module) -> str:
            return probe.param_digest(model.parameters())
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    ckpt_group = dist.new_group(backend="gloo") if args.async_save else None  # async saves' own collectives

    data = make_data(args.seed)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(FEATURES, args.width), nn.ReLU(),
                                                  nn.Linear(args.width, args.width), nn.ReLU(),
                                                  nn.Linear(args.width, CLASSES)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    root = args.checkpoint_dir

    step = 0
    latest = None if "no-load" in args.broken else read_latest(root)
    if latest is not None:
        path = os.path.join(root, latest)
        p.checkpoint_load_begin(path)
        model_sd, optim_sd = get_state_dict(model, opt)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
        try:
            dcp.load(state, checkpoint_id=path)
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            p.checkpoint_load_failed(path, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1][:200]}")
            raise
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        step = int(state["step"])
        p.checkpoint_loaded(step, path, digest_of(model), world_size=world)

    pending: Any = None  # the async save in flight: (future, step, path, digest)

    def finish_pending() -> None:
        nonlocal pending
        if pending is None:
            return
        future, saved_step, path, saved_digest = pending
        pending = None
        future.result()
        if rank == 0:
            if "latest-before-save" not in args.broken:
                point_latest(root, saved_step)
            rotate(root, args.keep)
        p.checkpoint_saved(saved_step, path, saved_digest, mode="async")

    while step < args.steps:
        began = time.monotonic()
        x, y = batch(args.seed, step + 1, rank, world, args.batch_size, data)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        pad = args.step_time_ms / 1000 - (time.monotonic() - began)
        if pad > 0:
            time.sleep(pad)
        step += 1
        p.step(step, loss=loss.item(), params=model.parameters())
        if step % args.checkpoint_every == 0 or step == args.steps:
            finish_pending()
            path = step_dir(root, step)
            if rank == 0 and "latest-before-save" in args.broken:
                point_latest(root, step)  # the bug: a crash from here until the save ends resumes from nothing
            p.checkpoint_save_begin(step, path, mode="async" if args.async_save else "sync")
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)}
            digest = digest_of(model)
            if args.async_save:
                pending = (dcp.async_save(state, checkpoint_id=path, process_group=ckpt_group), step, path, digest)
            else:
                dcp.save(state, checkpoint_id=path)
                if rank == 0:
                    if "latest-before-save" not in args.broken:
                        point_latest(root, step)
                    rotate(root, args.keep)
                p.checkpoint_saved(step, path, digest, mode="sync")
    finish_pending()
    p.emit("final", step=step, digest=digest_of(model))
    dist.barrier()
    dist.destroy_process_group()
    p.exit()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the C++ teardown (a finished gloo worker can abort in its destructors on CPU)


if __name__ == "__main__":
    main()
