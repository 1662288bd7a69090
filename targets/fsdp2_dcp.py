"""An FSDP2 trainer (``fully_shard`` per layer) that checkpoints its sharded state with DCP.

Gloo on CPU, launched by ``torchrun``. Every ``Linear`` layer is sharded with ``fully_shard`` and then
the whole model, so every parameter is a ``DTensor`` whose dim 0 is split across the ranks. Every
``--checkpoint-every`` steps all ranks write ``get_state_dict(model, optimizer)`` (sharded: each rank
writes its own shards) and the step with ``dcp.save`` (or ``dcp.async_save`` with ``--async-save``)::

    <dir>/step-000040/__0_0.distcp    rank 0's shards
    <dir>/step-000040/__1_0.distcp    rank 1's shards
    <dir>/step-000040/.metadata       written last, by rank 0, once every shard is written
    <dir>/latest                      "step-000040", moved by rank 0 once the save has finished

On start every rank resumes from the newest ``step-*`` directory that has a ``.metadata`` (a directory
without one is a save that never finished), with ``dcp.load`` and ``set_state_dict``. DCP reshards
on load, so a checkpoint written by 2 ranks loads on 1.

Determinism: the data of step ``s`` is a fixed global batch of ``--global-batch`` samples drawn by a
generator seeded by ``(seed, s)``; rank ``r`` of ``w`` trains on its ``r``-th slice of it. A run that is
killed and resumed at the same world size ends bitwise equal to a run with no faults. At another
world size (an elastic job that lost a node) it is the same computation up to floating-point summation
order: not bitwise, within a small tolerance (``equivalent_to_reference`` compares the final checkpoints).

The probe's digests are of each rank's *local shards* (``probe.param_digest`` on DTensors): rank 0's
digest covers the first half of every parameter's rows, rank 1's the second half; the checkpoint
events say so with ``digest_scope="shard"`` (the restore check then compares a rank's load with its
own save at the same world size, and does not compare a resharded load). The ``final``
event names ``replica_group=rank`` (each rank holds a different part; there are no replicas), and
``full_digest``, the digest of the whole (unsharded) parameters, equal on every rank.

Events: ``step``, ``checkpoint_save_begin``, ``checkpoint_commit`` (rank 0, in the writer's ``finish``:
every shard is written, ``.metadata`` is not yet: a trigger point between the two),
``checkpoint_saved``, ``checkpoint_load_begin``, ``checkpoint_loaded`` (``world_size_saved``: the world
size that wrote it), ``final``.

Deliberately broken modes (``--broken``):
  latest-without-wait  with --async-save, rank 0 moves ``latest`` as soon as the save is launched,
                       without waiting for it: ``latest`` names a directory that has no .metadata yet
  no-optim-restore     resume loads the model's shards but not the optimizer's (momentum starts over)
  ignore-metadata      resume takes the newest ``step-*`` directory whether it has a .metadata or not
  stale-data-split     after a resume at another world size, each rank keeps splitting the global batch
                       by the world size that wrote the checkpoint (``world_size_saved``): on a smaller
                       world part of every global batch is never trained on (an elastic job's bug)

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/fsdp2_dcp.py --checkpoint-dir /tmp/ck``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_model_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from chaos import probe
from chaos.probe import sdc
from chaos.probe.detectors import SdcDetectors

BROKEN_MODES = ("latest-without-wait", "no-optim-restore", "ignore-metadata", "stale-data-split")
STEP_DIR = re.compile(r"^step-(\d{6})$")
FEATURES, CLASSES, SAMPLES = 32, 10, 4096


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="total optimizer steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--checkpoint-every", type=int, default=10, help="steps between saves")
    ap.add_argument("--keep", type=int, default=3, help="complete checkpoints kept on disk")
    ap.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks")
    ap.add_argument("--width", type=int, default=256, help="hidden width")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="collective timeout, seconds")
    ap.add_argument("--step-time-ms", type=float, default=0.0, help="pad every step to at least this long, ms")
    ap.add_argument("--async-save", action="store_true", help="save with dcp.async_save")
    ap.add_argument("--sdc-detectors", type=lambda v: [d for d in v.split(",") if d], default="nonfinite,spike",
                    help="SDC detectors to run, comma-separated: nonfinite,spike ('' for none)")
    ap.add_argument("--broken", action="append", default=[], choices=BROKEN_MODES)
    return ap.parse_args(argv)


class CommitMarkedWriter(FileSystemWriter):
    """DCP's file-system writer, with a ``checkpoint_commit`` event on the coordinator (rank 0) once
    every rank's shards are written and just before ``.metadata`` is."""

    def __init__(self, path: str, step: int) -> None:
        super().__init__(path)
        self.chaos_step = step

    def finish(self, metadata: Any, results: Any) -> None:
        probe.get().emit("checkpoint_commit", step=self.chaos_step, path=str(self.path))
        super().finish(metadata, results)


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:06d}")


def checkpoints(root: str, complete_only: bool = True) -> list[tuple[int, str]]:
    """(step, directory) of the checkpoints under ``root``, oldest first; with ``complete_only``,
    only those whose ``.metadata`` exists (DCP writes it last)."""
    found = []
    for name in os.listdir(root):
        m = STEP_DIR.match(name)
        path = os.path.join(root, name)
        if m and os.path.isdir(path) and (not complete_only or os.path.isfile(os.path.join(path, ".metadata"))):
            found.append((int(m.group(1)), path))
    return sorted(found)


def point_latest(root: str, step: int) -> None:
    """Make ``latest`` name ``step-<step>`` (write, fsync, rename): for tools and people, not for resume."""
    tmp = os.path.join(root, "latest.tmp")
    with open(tmp, "w") as f:
        f.write(os.path.basename(step_dir(root, step)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(root, "latest"))


def prune(root: str, keep: int, latest_step: int) -> None:
    """Remove complete checkpoints older than the newest ``keep`` (never the one at ``latest_step``)
    and any unfinished directory older than the newest complete one."""
    done = checkpoints(root)
    newest = done[-1][0] if done else 0
    kept = {s for s, _ in done[-keep:]} | {latest_step}
    for s, path in checkpoints(root, complete_only=False):
        if s not in kept and s <= newest:
            shutil.rmtree(path, ignore_errors=True)


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian inputs labelled by a fixed random linear teacher: ``(SAMPLES, FEATURES)`` and ``(SAMPLES,)``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    return x, (x @ torch.randn(FEATURES, CLASSES, generator=g)).argmax(dim=1)


def my_slice(seed: int, step: int, rank: int, world: int, global_batch: int,
             data: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s slice of step ``step``'s global batch (the same whoever computes it)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randperm(SAMPLES, generator=g)[:global_batch].chunk(world)[rank]
    return data[0][idx], data[1][idx]


def build(width: int) -> nn.Module:
    model = nn.Sequential(nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, CLASSES))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def full_digest(model: nn.Module) -> str:
    """Digest of the whole parameters (collective: every rank gathers every shard)."""
    return probe.param_digest(p.full_tensor() for p in model.parameters())  # type: ignore[operator]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.global_batch % int(os.environ.get("WORLD_SIZE", "1")):
        sys.exit(f"--global-batch {args.global_batch} does not split evenly over the world size")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    p = probe.get()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial weights on every rank, before sharding
    root = args.checkpoint_dir
    os.makedirs(root, exist_ok=True)
    ckpt_group = dist.new_group(backend="gloo") if args.async_save else None
    data = make_data(args.seed)
    model = build(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def restore_newest() -> int | None:
        """Load the newest complete checkpoint on every rank (collective); its step, or None: none."""
        found = checkpoints(root, complete_only="ignore-metadata" not in args.broken)
        if not found:
            return None
        path = found[-1][1]
        p.checkpoint_load_begin(path)
        model_sd, optim_sd = get_state_dict(model, opt)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0),
                                 "world_size": torch.tensor(0)}
        if "no-optim-restore" in args.broken:
            # the bug: the optimizer's state is left out (dcp.load would fill get_state_dict's optimizer
            # tensors in place: they are the optimizer's own), so momentum starts over
            del state["optim"]
        try:
            dcp.load(state, checkpoint_id=path)
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            p.checkpoint_load_failed(path, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1][:200]}")
            raise
        if "no-optim-restore" in args.broken:
            set_model_state_dict(model, state["model"])
        else:
            set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        saved_world = int(state["world_size"])
        p.checkpoint_loaded(int(state["step"]), path, probe.param_digest(model.parameters()), digest_scope="shard",
                            world_size_saved=saved_world)
        if "stale-data-split" in args.broken and saved_world > world:
            split[0] = saved_world
        return int(state["step"])

    # SDC: chaos's injector (a no-op outside a chaos run), then the detectors; an alarm rolls every
    # rank back to the newest complete checkpoint (three alarms at one step: the update is skipped)
    inj = sdc.Injector.from_env(p, model)
    det = SdcDetectors(p, model, nonfinite="nonfinite" in args.sdc_detectors, spike="spike" in args.sdc_detectors,
                       digest_every=0, warmup=20, window=50)
    rollbacks: dict[int, int] = {}
    split = [world]  # the world size the global batch is split by (the bug: the saved one, after a resume)
    step = restore_newest() or 0
    pending: Any = None  # the async save in flight: (future, step, path, digest)

    def finish_pending() -> None:
        nonlocal pending
        if pending is None:
            return
        future, saved_step, path, digest = pending
        pending = None
        future.result()
        if rank == 0:
            if "latest-without-wait" not in args.broken:
                point_latest(root, saved_step)
            prune(root, args.keep, saved_step)
        p.checkpoint_saved(saved_step, path, digest, mode="async", digest_scope="shard")

    while step < args.steps:
        began = time.monotonic()
        x, y = my_slice(args.seed, step + 1, rank, split[0], args.global_batch, data)
        opt.zero_grad(set_to_none=True)
        inj.begin_step(step + 1)
        det.begin_step(step + 1)
        loss = loss_fn(model(x), y)
        loss.backward()
        inj.after_backward()
        alarms = det.check_gradients(loss)
        if alarms and rollbacks.get(step + 1, 0) < 3:
            rollbacks[step + 1] = rollbacks.get(step + 1, 0) + 1
            finish_pending()
            back = restore_newest()
            if back is not None:
                p.emit("sdc_rollback", step=step + 1, to_step=back, detectors=sorted({a["detector"] for a in alarms}))
                step = back
                continue
        if alarms:
            p.emit("sdc_skip", step=step + 1, reason="no checkpoint to roll back to, or the alarm recurred")
            opt.zero_grad(set_to_none=True)
        opt.step()
        inj.after_step()
        pad = args.step_time_ms / 1000 - (time.monotonic() - began)
        if pad > 0:
            time.sleep(pad)
        step += 1
        if pending is not None and pending[0].done():
            finish_pending()  # the async save has landed: say so now, not at the next save
        p.step(step, loss=loss.item(), params=model.parameters())
        if step % args.checkpoint_every and step != args.steps:
            continue
        finish_pending()
        path = step_dir(root, step)
        p.checkpoint_save_begin(step, path, mode="async" if args.async_save else "sync")
        model_sd, optim_sd = get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(step), "world_size": torch.tensor(world)}
        digest = probe.param_digest(model.parameters())
        writer = CommitMarkedWriter(path, step)
        if args.async_save:
            future = dcp.async_save(state, storage_writer=writer, process_group=ckpt_group)
            pending = (future, step, path, digest)
            if rank == 0 and "latest-without-wait" in args.broken:
                point_latest(root, step)  # the bug: the save is still being written
        else:
            dcp.save(state, storage_writer=writer)
            if rank == 0:
                point_latest(root, step)
                prune(root, args.keep, step)
            p.checkpoint_saved(step, path, digest, mode="sync", digest_scope="shard")
    finish_pending()
    p.emit("final", step=step, digest=probe.param_digest(model.parameters()), replica_group=rank,
           full_digest=full_digest(model))
    dist.barrier()
    dist.destroy_process_group()
    p.exit()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the C++ teardown (a finished gloo worker can abort in its destructors on CPU)


if __name__ == "__main__":
    main()
