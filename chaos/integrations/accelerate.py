"""Hooks around a Hugging Face Accelerate ``Accelerator`` that report to the probe.

A job trained with Accelerate adds three lines::

    from chaos.integrations.accelerate import ChaosAccelerate

    model, optimizer = accelerator.prepare(model, optimizer)
    chaos = ChaosAccelerate(accelerator, model)           # after prepare()
    for step in range(start + 1, steps + 1):
        ...; accelerator.backward(loss); optimizer.step()
        chaos.step(step, loss, model)                      # after the optimizer step
    chaos.end(step, model)                                 # on every rank, after the last step

and gets, in a chaos run:

- ``accelerator.save_state(dir)`` reports ``checkpoint_save_begin`` (step = the last step given to
  :meth:`ChaosAccelerate.step`; a gate there holds every rank before anything is written), then,
  once every rank has written its part (a barrier: each rank writes its own
  ``random_states_<rank>.pkl``), ``checkpoint_saved`` with the directory's :func:`state_digest`.
- ``accelerator.load_state(dir)`` reports ``checkpoint_load_begin``, then ``checkpoint_loaded`` (the
  step resumed at, from ``step_of(dir)``; by default the last number in the directory's name) with
  the directory's digest, or ``checkpoint_load_failed`` with the error, which is raised again.
- :meth:`ChaosAccelerate.step` → ``probe.step(step, loss=, params=)`` (gates at a step are honoured);
  the probe's in-process SDC faults (``$CHAOS_SDC``: gradient faults through
  ``accelerator.backward``, parameter faults after the optimizer step).
- :meth:`ChaosAccelerate.end` → ``final`` with the unwrapped model's parameter digest, and ``exit``.

Outside a chaos run (no ``CHAOS_RUN_DIR``) nothing is wrapped: ``save_state``, ``load_state`` and
``backward`` stay the accelerator's own methods, and ``step``/``end`` return at once.

Imports only :mod:`chaos.probe` and torch (Accelerate's own dependency) at module load; the
``Accelerator`` is duck-typed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from chaos import probe
from chaos.probe import sdc

__all__ = ["ChaosAccelerate", "attach", "state_digest", "step_from_name"]

FORMAT = "accelerate"
_NUMBER = re.compile(r"(\d+)\D*$")


def state_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 (64 hex digits) of a ``save_state`` directory: :func:`chaos.probe.dir_digest` (the runner's
    reader, :mod:`chaos.accelcheck`, computes the same). Raises ``OSError``."""
    return probe.dir_digest(path)


def step_from_name(path: str | os.PathLike[str]) -> int | None:
    """The last number in the directory's base name (``step-000040`` → 40), or None."""
    m = _NUMBER.search(os.path.basename(os.path.normpath(os.fspath(path))))
    return int(m.group(1)) if m else None


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()[:300]}"


class ChaosAccelerate:
    """Reports an ``Accelerator``'s saves, loads and steps to the probe; see the module docstring.

    ``accelerator``: a prepared ``accelerate.Accelerator``. ``model``: the prepared model, for the
    in-process SDC faults (None: the model given to the first :meth:`step`, so a fault at step 1's
    gradients is missed). ``step_of(path) -> int``: the step a loaded directory holds (default
    :func:`step_from_name`). ``digest_every``: a parameter digest in every ``digest_every``-th step
    event (0: none; the ``final`` event always has one).
    """

    def __init__(self, accelerator: Any, model: Any = None, step_of: Callable[[str], int | None] | None = None,
                 digest_every: int = 1) -> None:
        self.accelerator = accelerator
        self.probe = probe.get()
        self.enabled = self.probe.enabled
        self.step_of = step_of or step_from_name
        self.digest_every = digest_every
        self.last_step = 0
        self._injector: sdc.Injector | None = None
        self._unwrapped: tuple[Any, Any] = (None, None)  # (model, accelerator.unwrap_model(model)): ~30 µs a call
        if not self.enabled:
            return
        if model is not None:
            self._make_injector(model)
        self._save_state = accelerator.save_state
        self._load_state = accelerator.load_state
        self._backward = accelerator.backward
        accelerator.save_state = self.save_state
        accelerator.load_state = self.load_state
        accelerator.backward = self.backward

    # -- wrapped methods (in a chaos run only) -------------------------------------------------
    def save_state(self, output_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``Accelerator.save_state`` with ``checkpoint_save_begin`` before and ``checkpoint_saved`` after
        every rank has written; returns what it returns. An error is recorded and raised."""
        acc, step = self.accelerator, self.last_step
        path = os.fspath(output_dir) if output_dir is not None else self._automatic_path()
        self.probe.checkpoint_save_begin(step, path, format=FORMAT)
        try:
            location = self._save_state(output_dir, *args, **kwargs)
        except Exception as exc:
            self.probe.emit("checkpoint_save_failed", step=step, path=path, error=_brief(exc))
            raise
        path = os.fspath(location) if location is not None else path
        acc.wait_for_everyone()  # every rank's random_states_<rank>.pkl is on disk
        digest = self._shared_digest(path)
        # (as probe.checkpoint_saved; a digest the main process could not compute is None, not compared)
        self.probe.emit("checkpoint_saved", step=step, path=path, digest=digest, format=FORMAT)
        return location

    def load_state(self, input_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``Accelerator.load_state`` with ``checkpoint_load_begin`` before and ``checkpoint_loaded`` (or
        ``checkpoint_load_failed``, then the error raised again) after."""
        path = os.fspath(input_dir) if input_dir is not None else self._newest_automatic()
        self.probe.checkpoint_load_begin(path, format=FORMAT)
        try:
            result = self._load_state(input_dir, *args, **kwargs)
        except Exception as exc:
            self.probe.checkpoint_load_failed(path, _brief(exc), format=FORMAT)
            raise
        try:
            digest: str | None = state_digest(path)
        except OSError:  # gone after it loaded: the runner's own verification says what happened
            digest = None
        step = self.step_of(path)
        if step is not None:
            self.last_step = step
            if self._injector is not None:
                self._injector.begin_step(step + 1)
        self.probe.checkpoint_loaded(step, path, digest, format=FORMAT)  # type: ignore[arg-type]
        return result

    def backward(self, loss: Any, **kwargs: Any) -> Any:
        """``Accelerator.backward``, then the SDC faults that land on the all-reduced gradients."""
        out = self._backward(loss, **kwargs)
        if self._injector is not None:
            self._injector.after_backward()
        return out

    # -- the loop's calls ----------------------------------------------------------------------
    def step(self, step: int, loss: Any = None, model: Any = None) -> None:
        """Training step ``step`` (1-based, global) has finished its optimizer update. ``loss``: a
        float or a 0-d tensor; ``model``: its parameters' digest goes in the event. May block at a gate."""
        if not self.enabled:
            return
        if self._unwrapped[0] is None and model is not None:
            self._make_injector(model)
        if self._injector is not None:
            self._injector.after_step()  # parameter faults, after the optimizer step
        self.last_step = step
        digest = model is not None and self.digest_every > 0 and step % self.digest_every == 0
        value = loss.item() if hasattr(loss, "item") else loss
        self.probe.step(step, loss=value, params=self._unwrap(model).parameters() if digest else None)
        if self._injector is not None:
            self._injector.begin_step(step + 1)

    def end(self, step: int, model: Any) -> None:
        """The job is done at ``step``: ``final`` with the unwrapped model's parameter digest, then ``exit``.
        Call on every rank."""
        if not self.enabled:
            return
        self.probe.emit("final", step=step, digest=probe.param_digest(self._unwrap(model).parameters()))
        self.probe.exit()

    # -- helpers -------------------------------------------------------------------------------
    def _make_injector(self, model: Any) -> None:
        injector = sdc.Injector.from_env(self.probe, self._unwrap(model))
        if injector.faults:  # none for this rank: no per-step calls at all
            self._injector = injector
            injector.begin_step(self.last_step + 1)

    def _unwrap(self, model: Any) -> Any:
        if self._unwrapped[0] is not model:
            self._unwrapped = (model, self.accelerator.unwrap_model(model))
        return self._unwrapped[1]

    def _shared_digest(self, path: str) -> str | None:
        """The main process's :func:`state_digest` of ``path``, the same on every rank (one broadcast)."""
        acc = self.accelerator
        digest: str | None = None
        if acc.is_main_process:
            try:
                digest = state_digest(path)
            except OSError:
                digest = None
        if acc.num_processes > 1:
            import torch.distributed as dist

            box = [digest]
            dist.broadcast_object_list(box, src=0)
            digest = box[0]
        return digest

    def _automatic_path(self) -> str:
        acc = self.accelerator
        return os.path.join(acc.project_dir, "checkpoints", f"checkpoint_{acc.save_iteration}")

    def _newest_automatic(self) -> str:
        root = os.path.join(self.accelerator.project_dir or "", "checkpoints")
        try:
            names = sorted(os.listdir(root), key=lambda n: step_from_name(n) or 0)
        except OSError:
            return root
        return os.path.join(root, names[-1]) if names else root


def attach(accelerator: Any, model: Any = None, **kwargs: Any) -> ChaosAccelerate:
    """``ChaosAccelerate(accelerator, model, **kwargs)``."""
    return ChaosAccelerate(accelerator, model, **kwargs)
