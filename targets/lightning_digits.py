"""A deterministic Lightning classifier on scikit-learn's bundled digits, trained with DDP on CPU.

``Trainer(strategy="ddp", accelerator="cpu", devices=<nproc>, num_nodes=<nodes>)`` launched by
``torchrun``: Lightning reads torchrun's environment (``TorchElasticEnvironment``) and does not spawn.
The one line of chaos in it is ``callbacks=[ChaosCallback()]`` (``chaos.integrations.lightning``).

Checkpoints: ``ModelCheckpoint(dirpath=--checkpoint-dir, every_n_train_steps=--checkpoint-every,
save_last=True)`` writes ``epoch=E-step=S.ckpt`` (the newest kept) and ``last.ckpt``; a restarted job
resumes with ``trainer.fit(..., ckpt_path="last")``.

Determinism: the batch of optimizer step ``s`` (1-based) is drawn from a generator seeded by
``(seed, s)`` (a permutation of the training set; rank ``r`` takes its ``r``-th slice), there is no
dropout, and the data position is the ``global_step`` Lightning restores from the checkpoint (the
loader starts at ``global_step + 1`` when Lightning first iterates it, after the restore). So a run
killed and resumed mid-epoch ends bitwise equal to a fault-free run at the same world size.

Why not a plain ``DataLoader``: Lightning's mid-epoch resume restores the loop's counters (epoch,
batch index, ``global_step``) but not a map-style ``DataLoader``'s position (it warns "your dataloader
is not resumable"): the resumed epoch starts its data over from the epoch's first batch and ends
early when the restored batch count reaches the epoch's length, so the resumed run trains on
batches the fault-free run did not — ``--broken plain-dataloader`` shows it.

Deliberately broken modes (``--broken``, repeatable):
  no-resume             ignore ``last.ckpt``: start over from step 0 after a restart
  no-optimizer-restore  drop the optimizer's state (SGD momentum) after the resume
  plain-dataloader      a plain shuffled DataLoader with Lightning's DistributedSampler (see above)

``--blackbox``: no chaos at all (no ``ChaosCallback``); every rank prints ``[rank0] step 12 loss
2.301234`` and rank 0 ``saved checkpoint last.ckpt (step 20)`` after each save, for black-box
scenarios. ``--no-callback``: neither (the bare loop, for the overhead benchmark).

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/lightning_digits.py --checkpoint-dir /tmp/ck``
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BROKEN_MODES = ("no-resume", "no-optimizer-restore", "plain-dataloader")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="max_steps: total optimizer steps (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--checkpoint-every", type=int, default=10, help="ModelCheckpoint every_n_train_steps")
    ap.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--timeout-s", type=float, default=60.0, help="collective timeout (DDPStrategy timeout), s")
    ap.add_argument("--devices", type=int, default=None, help="devices per node (default: torchrun's LOCAL_WORLD_SIZE)")
    ap.add_argument("--num-nodes", type=int, default=None, help="nodes (default: WORLD_SIZE / LOCAL_WORLD_SIZE)")
    ap.add_argument("--digest-every", type=int, default=10, help="ChaosCallback(digest_every=...)")
    ap.add_argument("--sdc-detectors", type=lambda v: [d for d in v.split(",") if d], default="",
                    help="ChaosCallback(sdc_detectors=...), comma-separated: nonfinite,spike,digest ('' for none)")
    ap.add_argument("--step-time-ms", type=float, default=0.0, help="pad every step to at least this long, ms")
    ap.add_argument("--tmp-dir", default=None,
                    help="the job's TMPDIR: Lightning's _atomic_save writes each checkpoint to a temporary file there, "
                         "then moves it to its name (a rename on the same filesystem, else a copy onto the name)")
    ap.add_argument("--blackbox", action="store_true", help="no chaos: print step and save lines instead")
    ap.add_argument("--no-callback", action="store_true", help="no chaos and no lines (the bare loop)")
    ap.add_argument("--time-steps", default=None,
                    help="write rank 0's time.perf_counter() at the end of every step to this JSON file (benchmarks)")
    ap.add_argument("--time-blocks", type=int, default=0,
                    help="with --time-steps: switch the ChaosCallback off and on every N steps (benchmarks)")
    ap.add_argument("--broken", action="append", default=[], choices=BROKEN_MODES)
    return ap.parse_args(argv)


def digits(seed: int) -> TensorDataset:
    """The digits training set (80 % of the 1,797 images, stratified by class; 64 features in 0..1).

    Read from scikit-learn's bundled ``digits.csv.gz`` without importing sklearn (a second per start)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lightning_digits.py needs scikit-learn installed (it reads its bundled digits data)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt") as f:
        rows = torch.tensor([[int(float(v)) for v in line.split(",")] for line in f if line.strip()])
    x, y = rows[:, :64].to(torch.float32) / 16.0, rows[:, 64]
    g = torch.Generator().manual_seed(seed)
    keep = []
    for label in range(10):
        idx = (y == label).nonzero().flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        keep.append(idx[round(0.2 * len(idx)):])
    i = torch.cat(keep).sort().values
    return TensorDataset(x[i], y[i])


class StepBatches:
    """The batches of optimizer steps ``first_step() ..`` to the end of their epoch, for one rank.

    Step ``s`` takes the ``rank``-th slice of ``batch_size`` of a permutation drawn from a generator
    seeded by ``(seed, s)``. An epoch is ``len(self)`` steps. ``first_step`` is read when Lightning
    iterates the loader (after it restored the checkpoint), so the position is the restored step."""

    def __init__(self, data: TensorDataset, seed: int, rank: int, world: int, batch_size: int,
                 first_step: Callable[[], int]) -> None:
        self.x, self.y = data.tensors
        self.seed, self.rank, self.world, self.batch_size = seed, rank, world, batch_size
        self.first_step = first_step
        self.per_epoch = len(self.x) // (batch_size * world)

    def __len__(self) -> int:
        return self.per_epoch

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        idx = torch.randperm(len(self.x), generator=g)[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        return self.x[idx], self.y[idx]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        first = self.first_step()
        end = ((first - 1) // self.per_epoch + 1) * self.per_epoch  # the last step of first's epoch
        for step in range(first, end + 1):
            yield self.batch(step)


class Digits(pl.LightningModule):
    def __init__(self, args: argparse.Namespace, data: TensorDataset) -> None:
        super().__init__()
        self.args, self.data = args, data
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
        self.loss_fn = nn.CrossEntropyLoss()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        began = time.monotonic()
        x, y = batch
        loss = self.loss_fn(self.net(x), y)
        pad = self.args.step_time_ms / 1000 - (time.monotonic() - began)
        if pad > 0:
            time.sleep(pad)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.args.lr, momentum=0.9)

    def train_dataloader(self) -> Any:
        if "plain-dataloader" in self.args.broken:
            # Lightning puts a DistributedSampler (shuffle, its seed) under it; not resumable mid-epoch
            return DataLoader(self.data, batch_size=self.args.batch_size, shuffle=True)
        return StepBatches(self.data, self.args.seed, self.global_rank, self.trainer.world_size, self.args.batch_size,
                           first_step=lambda: self.trainer.global_step + 1)

    def on_train_start(self) -> None:
        if "no-optimizer-restore" in self.args.broken and self.trainer.ckpt_path is not None:
            for opt in self.trainer.optimizers:
                opt.state.clear()  # the bug: momentum starts over after a resume


class Lines(pl.Callback):
    """What the job says in --blackbox mode: a line per step on every rank."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        print(f"[rank{trainer.global_rank}] step {trainer.global_step} loss {float(loss):.6f}", flush=True)


class LinesCheckpointIO(TorchCheckpointIO):
    """Lightning's own checkpoint IO, saying on stdout what it saved and loaded (--blackbox)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        super().save_checkpoint(checkpoint, path, storage_options)
        print(f"[rank0] saved checkpoint {os.path.basename(str(path))} (step {checkpoint['global_step']})", flush=True)

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        checkpoint = super().load_checkpoint(path, weights_only=weights_only)
        print(f"resumed from {os.path.basename(str(path))} (step {checkpoint['global_step']})", flush=True)
        return checkpoint


class StepTimes(pl.Callback):
    """Rank 0's ``time.perf_counter()`` at the end of every step, written as a JSON list at the end of training.

    With ``block`` and a ``chaos`` callback (which runs before this one), the callback's probe is taken away
    for steps in odd blocks of ``block`` steps (its hooks return at once) and given back in even ones, so
    one job interleaves both modes; ``time i`` then ends a step of the mode of step ``i + 1``'s block."""

    def __init__(self, path: str, block: int = 0, chaos: Any = None) -> None:
        self.path, self.block, self.chaos = path, block, chaos
        self.times: list[float] = []
        self._probe: Any = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.times.append(time.perf_counter())
        if self.block and self.chaos is not None:
            if self._probe is None:
                self._probe = self.chaos.probe
            off = (trainer.global_step // self.block) % 2 == 1  # the mode of the next step
            self.chaos.probe = None if off else self._probe

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_rank == 0:
            with open(self.path, "w") as f:
                json.dump(self.times, f)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", str(local_world)))
    devices = args.devices or local_world
    num_nodes = args.num_nodes or max(1, world // devices)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    if args.tmp_dir:
        os.makedirs(args.tmp_dir, exist_ok=True)
        os.environ["TMPDIR"] = tempfile.tempdir = args.tmp_dir

    callbacks: list[pl.Callback] = [ModelCheckpoint(dirpath=args.checkpoint_dir, every_n_train_steps=args.checkpoint_every,
                                                    save_last=True)]
    checkpoint_io: CheckpointIO | None = None
    if args.blackbox:
        callbacks.append(Lines())
        checkpoint_io = LinesCheckpointIO()
    elif not args.no_callback:
        from chaos.integrations.lightning import ChaosCallback

        callbacks.append(ChaosCallback(digest_every=args.digest_every, sdc_detectors=args.sdc_detectors))
    if args.time_steps:
        chaos = next((c for c in callbacks if type(c).__name__ == "ChaosCallback"), None)
        callbacks.append(StepTimes(args.time_steps, args.time_blocks, chaos))
    strategy = DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=args.timeout_s),
                           checkpoint_io=checkpoint_io)
    trainer = pl.Trainer(strategy=strategy, accelerator="cpu", devices=devices, num_nodes=num_nodes,
                         max_steps=args.steps, callbacks=callbacks, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         use_distributed_sampler="plain-dataloader" in args.broken)
    model = Digits(args, digits(args.seed))
    trainer.fit(model, ckpt_path=None if "no-resume" in args.broken else "last")
    # every rank leaves together, then skips the interpreter's C++ teardown (a finished gloo worker can
    # abort in its destructors on torch 2.13 CPU, which torchrun would count as a failure)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
