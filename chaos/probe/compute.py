"""Per-step compute time of one rank (issue 19): from the start of a step (before any injected delay) to
the end of the model's first forward pass in it, passed to :meth:`chaos.probe.Probe.note_compute` so that
the step's event carries ``compute_ms``. A slow rank shows here as its own number rising, while a rank that
only waits for a slow peer (in the gradient all-reduce, after its forward) does not.

On CPU the two ends are ``time.monotonic()`` readings, noted at the end of the forward. On CUDA they are a
pair of ``torch.cuda.Event(enable_timing=True)`` recorded on the current stream, read without a
synchronization at a later step once the device has passed them (``Event.query()``): the value then rides on
a later step event, under ``compute_ms_step`` (the step it belongs to). The CUDA lines are unverified on a
machine without a GPU.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import torch

from chaos.probe import Probe

MAX_PENDING = 8  # CUDA event pairs kept waiting for the device; older ones are dropped unread


class ComputeTimer:
    """Times each step's own compute on ``module`` (a forward hook on it). ``device``: where the module's
    parameters are (a CUDA device: timed with CUDA events on its current stream; None or another: the host clock)."""

    def __init__(self, probe: Probe, module: torch.nn.Module, device: torch.device | None) -> None:
        self.probe = probe
        self.cuda = device is not None and device.type == "cuda"
        self.device = device
        self._step: int | None = None  # the step whose first forward is awaited (None: none awaited)
        self._t0 = 0.0
        self._start: Any = None  # the step's start event (CUDA)
        self._pending: deque[tuple[int, Any, Any]] = deque()  # (step, start, end) not yet read (CUDA)
        self._hook = module.register_forward_hook(self._forward_done)

    def begin(self, step: int) -> None:
        """Step ``step`` begins: call first thing, before any injected delay."""
        if self.cuda:
            self._read_done()
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(self.device))
        else:
            self._t0 = time.monotonic()
        self._step = step

    def _forward_done(self, module: Any, args: Any, output: Any) -> None:
        step, self._step = self._step, None
        if step is None:
            return  # not the step's first forward (a replay), or no step begun
        if not self.cuda:
            self.probe.note_compute(step, (time.monotonic() - self._t0) * 1000)
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record(torch.cuda.current_stream(self.device))
        self._pending.append((step, self._start, end))
        while len(self._pending) > MAX_PENDING:
            self._pending.popleft()

    def _read_done(self) -> None:
        """Note the pending CUDA timings the device has passed, oldest first (a later one replaces an
        earlier one in the probe: the next step event carries the newest). CUDA only, unverified here."""
        while self._pending and self._pending[0][2].query():
            step, start, end = self._pending.popleft()
            self.probe.note_compute(step, start.elapsed_time(end))

    def remove(self) -> None:
        """Remove the forward hook."""
        self._hook.remove()
