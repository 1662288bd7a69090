"""A Lightning callback that reports a ``Trainer.fit`` to the chaos probe: one line in the user's code.

Usage::

    from chaos.integrations.lightning import ChaosCallback
    trainer = Trainer(..., callbacks=[ChaosCallback()])

What it reports, and from which hook (every event is the probe's, see :mod:`chaos.probe`):

- ``step`` — ``on_train_batch_end``, once per optimizer step (``trainer.global_step``, 1-based), with the
  batch's loss and, every ``digest_every`` steps and at ``max_steps``, the parameters' digest. A gate
  at that step (a step-accurate trigger) blocks there, after the step's update and before
  ``ModelCheckpoint`` (Lightning runs checkpoint callbacks last) saves it.
- ``checkpoint_save_begin`` / ``checkpoint_saved`` / ``checkpoint_save_failed`` and
  ``checkpoint_load_begin`` / ``checkpoint_loaded`` / ``checkpoint_load_failed`` — from a
  :class:`ProbeCheckpointIO` that ``setup`` wraps around ``trainer.strategy.checkpoint_io``: the save
  begins before the real ``save_checkpoint`` and is reported saved, with the file's SHA-256, only after
  it returned; a load reports the ``global_step`` it resumes at and the loaded file's SHA-256.
- ``final`` — ``on_train_end``, on every rank: ``trainer.global_step`` and the parameters' digest.
- ``exit`` — ``on_fit_end`` (``ok``); an exception out of ``fit`` is recorded by the probe itself.
- In-process SDC faults (``$CHAOS_SDC``, :class:`chaos.probe.sdc.Injector`): local gradient faults
  through parameter hooks, replica gradient faults in ``on_before_optimizer_step`` (after DDP's
  all-reduce), parameter faults in ``on_train_batch_end`` (after the optimizer step).
- Optional SDC detectors (``sdc_detectors``, :class:`chaos.probe.detectors.SdcDetectors`): they
  record ``sdc_alarm`` events; the callback does not react to them (no rollback, no skipped update).

Outside a chaos run (no ``CHAOS_RUN_DIR``) every hook returns at once: nothing is wrapped, written or
changed, so the callback can stay in a job's code for good.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

from chaos import probe as _probe
from chaos.probe import Probe

__all__ = ["ChaosCallback", "ProbeCheckpointIO", "file_digest"]

DETECTORS = ("nonfinite", "spike", "digest")


def file_digest(path: Any) -> str | None:
    """SHA-256 hex digest of the local file at ``path`` (None when it is not a local file: a directory
    checkpoint or a remote URL, which this wrapper does not digest). Reads the file in 1 MiB blocks."""
    try:
        if not os.path.isfile(path):
            return None
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except (OSError, TypeError, ValueError):
        return None


class ProbeCheckpointIO(CheckpointIO):
    """A ``CheckpointIO`` that reports around another one's saves and loads (it does not change them).

    ``inner`` does the real work (Lightning's ``TorchCheckpointIO`` by default, writing with
    ``_atomic_save``). Errors of ``inner`` are reported, then raised unchanged.
    """

    def __init__(self, inner: CheckpointIO, probe: Probe) -> None:
        self.inner = inner
        self.probe = probe

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Report ``checkpoint_save_begin`` (a gate may hold it there), save with ``inner``, then report
        ``checkpoint_saved`` with the written file's SHA-256 (or ``checkpoint_save_failed`` and raise)."""
        step = int(checkpoint.get("global_step", 0))
        where = str(path)
        self.probe.checkpoint_save_begin(step, where)
        try:
            self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        except BaseException as exc:
            self.probe.emit("checkpoint_save_failed", step=step, path=where, error=f"{type(exc).__name__}: {exc}"[:500])
            raise
        digest = file_digest(path)
        size = os.path.getsize(path) if digest is not None else None
        self.probe.checkpoint_saved(step, where, digest or "", bytes=size)

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        """Report ``checkpoint_load_begin``, load with ``inner``, then ``checkpoint_loaded`` with the
        ``global_step`` it holds and the file's SHA-256 (or ``checkpoint_load_failed`` and raise)."""
        where = str(path)
        self.probe.checkpoint_load_begin(where)
        kwargs: dict[str, Any] = {"weights_only": weights_only}
        if map_location is not None:
            kwargs["map_location"] = map_location
        try:
            checkpoint = self.inner.load_checkpoint(path, **kwargs)
        except BaseException as exc:
            self.probe.checkpoint_load_failed(where, f"{type(exc).__name__}: {exc}"[:2000])
            raise
        step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
        self.probe.checkpoint_loaded(int(step or 0), where, file_digest(path) or "")
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        """Remove with ``inner`` (a rotated-away checkpoint; not reported)."""
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


class ChaosCallback(pl.Callback):
    """Reports steps, checkpoint saves and loads, the final parameters and the exit to the probe.

    ``digest_every``: steps between parameter digests in ``step`` events (and at ``max_steps``; 0: only
    in ``final``); each costs one BLAKE2b pass over the parameters (copied to CPU first on a GPU).
    ``sdc_detectors``: detectors to run every step, any of ``nonfinite``, ``spike``, ``digest`` (each
    rank calls collectives for them; needs torch.distributed initialized, i.e. a DDP run).
    ``replica_digest_every``: steps between the ``digest`` detector's cross-replica comparisons.
    ``probe``: the probe to report to (default: this process's, :func:`chaos.probe.get`).

    Raises ``ValueError`` for an unknown detector name.
    """

    def __init__(self, digest_every: int = 10, sdc_detectors: Iterable[str] = (), replica_digest_every: int = 10,
                 probe: Probe | None = None) -> None:
        self.digest_every = digest_every
        self.sdc_detectors = tuple(sdc_detectors)
        unknown = sorted(set(self.sdc_detectors) - set(DETECTORS))
        if unknown:
            raise ValueError(f"unknown SDC detector(s) {unknown}; use any of {list(DETECTORS)}")
        self.replica_digest_every = replica_digest_every
        self._given_probe = probe
        self.probe: Probe | None = None  # set in setup() when a chaos run is on
        self._last_step = -1
        self._loss: torch.Tensor | None = None
        self._injector: Any = None
        self._detectors: Any = None

    # -- set up -----------------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        p = self._given_probe if self._given_probe is not None else _probe.get()
        if not p.enabled:
            return
        self.probe = p
        if stage == "fit" and not isinstance(trainer.strategy.checkpoint_io, ProbeCheckpointIO):
            # before Lightning restores ckpt_path, so the resume's load is reported too
            trainer.strategy.checkpoint_io = ProbeCheckpointIO(trainer.strategy.checkpoint_io, p)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        p = self.probe
        if p is None:
            return
        from chaos.probe import sdc

        self._last_step = trainer.global_step
        self._injector = sdc.Injector.from_env(p, pl_module)
        if not self._injector.faults:
            self._injector = None
        if self.sdc_detectors:
            if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
                p.emit("sdc_detectors_off", reason="torch.distributed is not initialized (the detectors are collective)")
            else:
                from chaos.probe.detectors import SdcDetectors

                # after the injector, so that the detectors' gradient hooks see what it did
                self._detectors = SdcDetectors(
                    p, pl_module, nonfinite="nonfinite" in self.sdc_detectors, spike="spike" in self.sdc_detectors,
                    digest_every=self.replica_digest_every if "digest" in self.sdc_detectors else 0)

    # -- every step -------------------------------------------------------------------------------
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.probe is None:
            return
        step = trainer.global_step + 1  # the optimizer step this batch works towards
        if self._injector is not None:
            self._injector.begin_step(step)
        if self._detectors is not None:
            self._detectors.begin_step(step)

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        if self._detectors is not None:
            self._loss = loss.detach()

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if self.probe is None:
            return
        if self._injector is not None:
            self._injector.after_backward()  # replica faults: after DDP's all-reduce
        if self._detectors is not None and self._loss is not None:
            self._detectors.check_gradients(self._loss)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        p = self.probe
        if p is None:
            return
        step = trainer.global_step
        if step == self._last_step:  # gradient accumulation: no optimizer step on this batch
            return
        self._last_step = step
        if self._injector is not None:
            self._injector.after_step()  # parameter faults: after the optimizer step
        digest = self.digest_every > 0 and (step % self.digest_every == 0 or step == trainer.max_steps)
        p.step(step, loss=_loss_of(outputs), params=pl_module.parameters() if digest else None)
        if self._detectors is not None:
            self._detectors.check_replicas()

    # -- the end ----------------------------------------------------------------------------------
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.probe is not None:
            self.probe.emit("final", step=trainer.global_step, digest=_probe.param_digest(pl_module.parameters()))

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.probe is not None:
            self.probe.exit()


def _loss_of(outputs: Any) -> float | None:
    """The loss of a ``training_step``'s output (a tensor, or a dict with ``loss``), as a float."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return float(loss.detach())
    return None
