"""The bundled target's own straggler detection (``--straggler-detect N``), as a training job has it.

Every rank times its own compute per step (from the start of the step to the end of its forward, before
DDP's all-reduce, so a fast rank's wait for a slow one does not count; on CUDA with a pair of CUDA
events). Every ``N`` steps the ranks exchange their median over the last ``N`` steps
(``all_gather_object``, any backend), and rank 0 names
a rank whose median exceeds the median of the others' by more than both ``min_ratio`` (1.2) and
``min_ms`` (2 ms): a ``straggler_detected`` event (``step``, ``slow_rank``, ``ratio``). Rank 0 says the
job has detection once, at the start (``straggler_detection``: ``every_steps``, ``min_ratio``, ``min_ms``).

``wrong_rank`` (``--broken straggler-detect-wrong-rank``) names the fastest rank instead of the slow
one: the bug the ``straggler`` check must catch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from chaos import probe

BROKEN = "straggler-detect-wrong-rank"  # the --broken mode


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``--straggler-detect N`` (steps between looks; 0, the default: no detection)."""
    ap.add_argument("--straggler-detect", type=int, default=0, metavar="N",
                    help="the job's own straggler detection: compare the ranks' compute every N steps (0: none)")


class StragglerDetector:
    """One rank's part of the detection (see the module doc); ``every`` steps between looks (0: a detector
    that does nothing). ``cuda``: time with CUDA events on the current stream (a slowed device shows even
    though the host runs ahead), read when the ranks exchange their medians; unverified without a GPU."""

    def __init__(self, p: probe.Probe, every: int, wrong_rank: bool = False, min_ratio: float = 1.2,
                 min_ms: float = 2.0, cuda: bool = False) -> None:
        self.p, self.every, self.wrong_rank, self.cuda = p, max(0, every), wrong_rank, cuda
        self.min_ratio, self.min_ms = min_ratio, min_ms
        self.times: list[float] = []
        self._t0 = 0.0
        self._start: Any = None
        self._pairs: list[tuple[Any, Any]] = []  # (start, end) CUDA events not read yet
        if self.every and dist.get_rank() == 0:
            p.emit("straggler_detection", every_steps=every, min_ratio=min_ratio, min_ms=min_ms)

    def begin_step(self) -> None:
        """A step begins (before anything is injected or computed)."""
        if not self.every:
            return
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.monotonic()

    def forward_done(self) -> None:
        """The step's forward is done: its compute so far is this rank's time for the step."""
        if not self.every:
            return
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._pairs.append((self._start, end))
        else:
            self.times.append((time.monotonic() - self._t0) * 1000)

    def end_step(self, step: int) -> None:
        """After step ``step`` (every rank calls it at every step): every ``every`` steps the ranks exchange
        their medians (a collective) and rank 0 records a straggler it finds."""
        if not self.every or step % self.every:
            return
        if self._pairs:
            self._pairs[-1][1].synchronize()  # every pair is done once the last one is
            self.times += [start.elapsed_time(end) for start, end in self._pairs]
            self._pairs.clear()
        if not self.times:
            return
        mine = statistics.median(self.times[-self.every:])
        self.times.clear()
        medians: list[float] = [0.0] * dist.get_world_size()
        dist.all_gather_object(medians, mine)
        if dist.get_rank() != 0 or len(medians) < 2:
            return
        slow = max(range(len(medians)), key=lambda r: medians[r])
        others = statistics.median(m for r, m in enumerate(medians) if r != slow)
        if medians[slow] - others <= self.min_ms or medians[slow] <= self.min_ratio * others:
            return
        named = min(range(len(medians)), key=lambda r: medians[r]) if self.wrong_rank else slow
        self.p.emit("straggler_detected", step=step, slow_rank=named,
                    ratio=round(medians[slow] / others, 3) if others > 0 else None,
                    medians_ms=[round(m, 3) for m in medians])
