"""A deterministic classifier trained with Hugging Face Accelerate, checkpointing with ``save_state``.

``Accelerator(cpu=True)`` picks up torchrun's environment (gloo on CPU) and wraps the model in DDP.
Every ``--checkpoint-every`` steps every rank takes part in ``accelerator.save_state(<dir>/step-N)``
(the main process writes ``model.safetensors`` and ``optimizer.bin``, each rank its own
``random_states_<rank>.pkl``); once all ranks are done the main process moves ``latest`` (write
``latest.tmp``, fsync, rename) and keeps the newest ``--keep``. On start every rank resumes with
``accelerator.load_state`` from what ``latest`` names. Synthetic data (Gaussian inputs labelled by a
fixed random linear teacher, as in ``dcp_trainer.py``): the batch of step ``s`` is drawn from a
generator seeded by ``(seed, s)`` and there is no dropout, so a run killed and restored ends bitwise
equal to a run with no faults at the same world size.

The chaos hooks are three lines (``ChaosAccelerate``, ``chaos.step``, ``chaos.end``); outside a chaos
run they do nothing.

Deliberately broken modes (``--broken``):
  no-resume             ignore ``latest``: a restarted job starts over from step 0
  latest-before-save    the main process moves ``latest`` to the new directory before ``save_state``
                        writes it: a crash during the save resumes from nothing
  no-optimizer-resume   after ``load_state`` the optimizer's state (momentum) is dropped

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/accelerate_digits.py --checkpoint-dir /tmp/ck``
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections import defaultdict
from datetime import timedelta

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from torch import nn

from chaos.integrations.accelerate import ChaosAccelerate

BROKEN_MODES = ("no-resume", "latest-before-save", "no-optimizer-resume")
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
    ap.add_argument("--width", type=int, default=128, help="hidden width")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="collective timeout, seconds")
    ap.add_argument("--step-time-ms", type=float, default=0.0, help="pad every step to at least this long, ms")
    ap.add_argument("--broken", action="append", default=[], choices=BROKEN_MODES)
    return ap.parse_args(argv)


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
    latest = read_latest(root)
    names = sorted(n for n in os.listdir(root) if n.startswith("step-") and os.path.isdir(os.path.join(root, n)))
    for name in names[:-keep]:
        if name != latest:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian inputs labelled by a fixed random linear teacher."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, CLASSES, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def batch(seed: int, step: int, rank: int, size: int, data: tuple[torch.Tensor, torch.Tensor]
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s batch for ``rank``: the same whichever incarnation computes it."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randperm(SAMPLES, generator=g)[rank * size:(rank + 1) * size]
    return data[0][idx], data[1][idx]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    accelerator = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(
        backend="gloo", timeout=timedelta(seconds=args.timeout_s))])
    rank = accelerator.process_index
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    root = args.checkpoint_dir
    os.makedirs(root, exist_ok=True)

    data = make_data(args.seed)
    model = nn.Sequential(nn.Linear(FEATURES, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    chaos = ChaosAccelerate(accelerator, model)
    loss_fn = nn.CrossEntropyLoss()

    step = 0
    latest = None if "no-resume" in args.broken else read_latest(root)
    if latest is not None:
        accelerator.load_state(os.path.join(root, latest))
        step = int(latest.rsplit("-", 1)[-1])
        if "no-optimizer-resume" in args.broken:
            optimizer.optimizer.state = defaultdict(dict)  # the bug: momentum starts over
        print(f"[rank{rank}] resumed from {latest} (step {step})", flush=True)

    while step < args.steps:
        began = time.monotonic()
        x, y = batch(args.seed, step + 1, rank, args.batch_size, data)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        pad = args.step_time_ms / 1000 - (time.monotonic() - began)
        if pad > 0:
            time.sleep(pad)
        step += 1
        chaos.step(step, loss, model)
        if step % args.checkpoint_every == 0 or step == args.steps:
            path = step_dir(root, step)
            if accelerator.is_main_process and "latest-before-save" in args.broken:
                point_latest(root, step)  # the bug: a crash from here until the save ends resumes from nothing
            accelerator.save_state(path)
            accelerator.wait_for_everyone()  # every rank's random_states_<rank>.pkl is written
            if accelerator.is_main_process:
                if "latest-before-save" not in args.broken:
                    point_latest(root, step)
                rotate(root, args.keep)
    chaos.end(step, model)
    accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the C++ teardown (a finished gloo worker can abort in its destructors on CPU)


if __name__ == "__main__":
    main()
