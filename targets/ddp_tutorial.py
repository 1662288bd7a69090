"""The PyTorch DDP tutorial's fault-tolerant ``Trainer``, as a black-box target: it imports nothing of chaos.

Follows https://pytorch.org/tutorials/intermediate/ddp_series_fault_tolerance.html
(pytorch/examples ``distributed/ddp-tutorial-series/multigpu_torchrun.py``) on CPU with gloo: a synthetic
random dataset with ``DistributedSampler``, DDP, epochs, and a snapshot (``MODEL_STATE`` + ``EPOCHS_RUN``)
that rank 0 saves every ``--save-every`` epochs with plain ``torch.save`` straight to ``--snapshot-path`` —
not atomic, exactly like the tutorial — and that every rank loads on start when the file exists.

Where it differs from the tutorial, on purpose:

- the model is ``Linear(20, W) → Linear(W, W) → Linear(W, 1)`` with ``W = --width`` (2048): the
  tutorial's ``Linear(20, 1)`` makes a 1 KB snapshot, a 2048×2048 layer makes it ~16 MB, so a save
  takes time the way a real model's does;
- ``EPOCHS_RUN`` is the number of epochs completed (``epoch + 1``); the tutorial stores ``epoch`` itself
  and so trains that epoch a second time after a restore;
- ``--atomic`` writes ``<path>.tmp``, fsyncs it and ``os.replace``-s it over the snapshot (the correct variant);
- ``--save-delay-ms`` sleeps that long after each MiB the save writes (a slow shared filesystem; 0: at
  disk speed), so that a fault can land in the middle of a save;
- the loss is MSE (the tutorial's ``cross_entropy`` on a one-column output is always 0), printed at
  the end of each epoch;
- every rank waits at a barrier, then drops its DDP model and collects it before ``destroy_process_group``
  (left to the interpreter's exit, gloo on torch 2.13 CPU can abort a finished rank: see ``main``).

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/ddp_tutorial.py --total-epochs 5``
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

MIB = 1 << 20


class MyTrainDataset(Dataset):
    """``size`` random (20 features → 1 target) pairs, the same on every rank (seeded)."""

    def __init__(self, size: int, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.data = [(torch.rand(20, generator=gen), torch.rand(1, generator=gen)) for _ in range(size)]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index]


class _SlowFile:
    """A file that sleeps ``delay_s`` per MiB written through it (a slow shared filesystem)."""

    def __init__(self, f: Any, delay_s: float) -> None:
        self.f = f
        self.delay_s = delay_s

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for start in range(0, len(view), MIB):
            chunk = view[start:start + MIB]
            self.f.write(chunk)
            self.f.flush()
            time.sleep(self.delay_s * len(chunk) / MIB)
        return len(view)

    def flush(self) -> None:
        self.f.flush()


def save(obj: dict, path: str, delay_ms: float) -> None:
    """``torch.save(obj, path)``, written ``delay_ms`` per MiB more slowly when asked."""
    if delay_ms <= 0:
        torch.save(obj, path)
        return
    with open(path, "wb") as f:
        torch.save(obj, _SlowFile(f, delay_ms / 1000))


class Trainer:
    def __init__(self, model: nn.Module, train_data: DataLoader, optimizer: torch.optim.Optimizer, save_every: int,
                 snapshot_path: str, atomic: bool, save_delay_ms: float) -> None:
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        self.atomic = atomic
        self.save_delay_ms = save_delay_ms
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path: str) -> None:
        snapshot = torch.load(snapshot_path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> float:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def _run_epoch(self, epoch: int) -> None:
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        loss = float("nan")
        for source, targets in self.train_data:
            loss = self._run_batch(source, targets)
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Loss: {loss:.6f}")

    def _save_snapshot(self, epoch: int) -> None:
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "EPOCHS_RUN": epoch + 1,
        }
        if self.atomic:
            tmp = self.snapshot_path + ".tmp"
            save(snapshot, tmp, self.save_delay_ms)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.snapshot_path)
        else:
            save(snapshot, self.snapshot_path, self.save_delay_ms)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs: int) -> None:
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs(args: argparse.Namespace) -> tuple[Dataset, nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(args.seed)
    train_set = MyTrainDataset(args.dataset_size, args.seed)
    model = nn.Sequential(nn.Linear(20, args.width), nn.Linear(args.width, args.width), nn.Linear(args.width, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset))


def main(args: argparse.Namespace) -> None:
    dist.init_process_group(backend="gloo")
    torch.set_num_threads(1)
    dataset, model, optimizer = load_train_objs(args)
    train_data = prepare_dataloader(dataset, args.batch_size)
    trainer = Trainer(model, train_data, optimizer, args.save_every, args.snapshot_path, args.atomic,
                      args.save_delay_ms)
    trainer.train(args.total_epochs)
    dist.barrier()  # rank 0's last save is done
    # drop the DDP model before tearing gloo down: its reducer holds the process group in a reference
    # cycle, and left to the interpreter's exit gloo's threads are destroyed while still joinable, which
    # aborts a finished rank ("terminate called without an active exception"; 3 runs in 48, 0 in 60 after)
    del trainer, model, optimizer
    gc.collect()
    dist.destroy_process_group()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="simple distributed training job (the PyTorch DDP tutorial's)")
    ap.add_argument("--total-epochs", type=int, default=5, help="total epochs to train the model")
    ap.add_argument("--save-every", type=int, default=1, help="how often to save a snapshot, epochs")
    ap.add_argument("--batch-size", type=int, default=32, help="input batch size on each rank")
    ap.add_argument("--snapshot-path", default="snapshot.pt", help="where the snapshot is saved and loaded from")
    ap.add_argument("--atomic", action="store_true", help="save to <path>.tmp, fsync, then os.replace (the fix)")
    ap.add_argument("--save-delay-ms", type=float, default=0.0,
                    help="sleep this long after each MiB a save writes (a slow shared filesystem), ms")
    ap.add_argument("--width", type=int, default=2048, help="hidden width (2048: a ~16 MB snapshot)")
    ap.add_argument("--dataset-size", type=int, default=512, help="samples in the synthetic dataset")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
