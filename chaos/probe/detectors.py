"""Detectors of silent data corruption that a DDP target runs every step.

Every method is *collective*: all ranks call it at the same point of the step, it gathers a few
numbers from every rank, and every rank gets the same verdicts — so every rank can react together
(roll back, skip the step) and no rank hangs in a collective the others skipped. A check on rank 0
only is a known bug (ecmwf/WeatherGenerator#2724): here each rank checks its own tensors and the
results are shared.

On a sharded model (FSDP2: every parameter a ``DTensor``) each rank judges its own shards: the
gradient numbers are of its shard of the reduced gradient (no hook sees a local gradient before the
reduce-scatter, so ``local_grad_norm`` is not measured), and ``digest`` is refused (no replicas).

Each detection is an ``sdc_alarm`` event ``{step, detector, suspected_ranks, evidence}``, recorded by
every rank.

Detectors (``SdcDetectors`` arguments turn them on and off):

``nonfinite``
    NaN/Inf in the loss, in this rank's local gradient before the all-reduce (parameter hooks), or in
    the all-reduced gradient. Ranks whose *local* gradient was non-finite are named as the source.
    Source: the non-finite checks of Megatron-LM's ``rerun_state_machine`` and of torchtitan.
``spike``
    Robust z-score ``0.6745 · (x − median) / MAD`` of log10 of each rank's local gradient norm, its
    all-reduced gradient norm, and its loss, over the last ``window`` clean steps (after ``warmup``
    steps). An alarm when ``z > z_threshold`` (default 8, i.e. about 12 standard deviations of a
    normal distribution: loss and gradient-norm noise on a clean run stays far below it; a ×1000
    scaling is z ≈ 30 or more). Upward only: loss and norms fall fast in healthy training. Source:
    Iglewicz & Hoaglin's modified z-score (1993); loss-spike monitoring as in the OPT-175B and
    Llama 3 training reports.
``digest``
    Every ``digest_every`` steps, each rank's parameter digest is gathered and compared; ranks
    outside the majority are named (with two ranks a mismatch names both). Source: Megatron-LM's
    ``--check-weight-hash-across-dp-replicas-interval``.
``replay``
    Recompute the step (same batch, same RNG state) and compare the resulting all-reduced gradient
    bitwise with the one about to be applied; ranks whose gradients differ are named. Costs one more
    forward/backward per checked step. A process's first step is not judged (DDP rebuilds its
    buckets after the first backward, changing the summation order). Source: Megatron-LM's ``rerun_state_machine`` (re-run a step
    to tell a transient fault from a real loss spike).
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from chaos.probe import Probe, local_tensor

Alarm = dict[str, Any]


def replica_digest(params: list[torch.Tensor]) -> int:
    """A 63-bit CRC-based digest of the parameters' bytes (cheap enough to run every few steps)."""
    crc, adler = 0, 1
    for p in params:
        data = p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        crc = zlib.crc32(data, crc)
        adler = zlib.adler32(data, adler)
    return ((crc << 31) ^ adler) & ((1 << 63) - 1)


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def robust_z(value: float, history: deque[float]) -> float:
    """Modified z-score of ``value`` against ``history`` (0 when the history has no spread)."""
    data = sorted(history)
    n = len(data)
    median = (data[n // 2] + data[(n - 1) // 2]) / 2
    dev = sorted(abs(x - median) for x in data)
    mad = (dev[n // 2] + dev[(n - 1) // 2]) / 2
    if mad == 0:
        mad = 1e-3  # a flat history: treat a change of more than ~0.01 decades as notable
    return 0.6745 * (value - median) / mad


class SdcDetectors:
    """The detectors of one rank. Create after wrapping the model in DDP; call, on every rank:

    - :meth:`begin_step` before the forward pass;
    - :meth:`check_gradients` after ``backward()`` and before ``optimizer.step()``;
    - :meth:`check_replay` after :meth:`check_gradients`, when ``replay`` is on;
    - :meth:`check_replicas` after ``optimizer.step()``.

    Each returns the alarms (empty when all is well); the caller decides how to react.
    """

    def __init__(self, probe: Probe, model: torch.nn.Module, *, nonfinite: bool = True, spike: bool = True,
                 digest_every: int = 10, replay: bool = False, window: int = 100, warmup: int = 50,
                 z_threshold: float = 8.0) -> None:
        self.probe = probe
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        module = getattr(model, "module", model)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.sharded = any(local_tensor(p) is not p for p in self.params)
        if self.sharded and digest_every > 0:
            raise ValueError("the digest detector compares replicas, and this model's parameters are sharded "
                             "(DTensor, e.g. FSDP2): each rank holds different values; pass digest_every=0")
        self.nonfinite, self.spike, self.replay = nonfinite, spike, replay
        self.digest_every, self.warmup, self.z_threshold = digest_every, warmup, z_threshold
        self.windows: dict[tuple[str, int], deque[float]] = {}
        self.window = window
        self.step = 0
        self._local_bad = False
        self._local_sq = 0.0
        self._replays = 0
        self.enabled = nonfinite or spike or replay or digest_every > 0
        if (nonfinite or spike) and not self.sharded:  # a sharded parameter's hook never sees a local gradient
            for p in self.params:
                p.register_hook(self._hook)

    def _hook(self, grad: torch.Tensor) -> None:
        # runs on this rank's own gradient, before DDP averages it across ranks
        if not self.nonfinite and not self.spike:
            return
        sq = float(grad.detach().double().pow(2).sum())
        if not math.isfinite(sq):
            self._local_bad = True
        else:
            self._local_sq += sq

    def begin_step(self, step: int) -> None:
        self.step = step
        self._local_bad = False
        self._local_sq = 0.0

    def _alarm(self, detector: str, suspected: list[int], **evidence: Any) -> Alarm:
        alarm = {"detector": detector, "suspected_ranks": suspected, "evidence": evidence}
        self.probe.emit("sdc_alarm", step=self.step, **alarm)
        return alarm

    def check_gradients(self, loss: torch.Tensor) -> list[Alarm]:
        """Non-finite and spike checks of this step's loss and gradients (collective)."""
        if not (self.nonfinite or self.spike):
            return []
        grads = [local_tensor(p.grad) for p in self.params if p.grad is not None]  # a sharded model: own shards
        post_sq = float(sum(g.detach().double().pow(2).sum() for g in grads)) if grads else 0.0
        loss_v = float(loss.detach())
        mine = torch.tensor([float(self._local_bad), float(not math.isfinite(post_sq) or not math.isfinite(loss_v)),
                             self._local_sq, post_sq, loss_v], dtype=torch.float64)
        rows = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine)
        table = torch.stack(rows)
        alarms: list[Alarm] = []
        if self.nonfinite:
            local = [r for r in range(self.world) if table[r, 0] > 0]
            post = [r for r in range(self.world) if table[r, 1] > 0]
            if local or post:
                alarms.append(self._alarm(
                    "nonfinite", local or post, where="local gradient before all-reduce" if local else
                    "loss or all-reduced gradient", local_ranks=local, reduced_ranks=post))
        if self.spike and not alarms:
            spikes: dict[int, dict[str, float]] = {}
            observed: list[tuple[deque[float], float]] = []
            for r in range(self.world):
                for col, what in ((2, "local_grad_norm"), (3, "grad_norm"), (4, "loss")):
                    value = float(table[r, col])
                    x = math.log10(math.sqrt(value) if col != 4 else value) if value > 0 else -30.0
                    hist = self.windows.setdefault((what, r), deque(maxlen=self.window))
                    observed.append((hist, x))
                    if len(hist) >= self.warmup:
                        z = robust_z(x, hist)
                        if z > self.z_threshold:  # upward only: loss and norms fall fast in healthy training
                            spikes.setdefault(r, {})[what] = round(z, 1)
            if spikes:
                # a rank's own loss or local gradient names it; the all-reduced norm spikes on every rank
                # at once unless the corruption came after the all-reduce (then only there)
                own = sorted(r for r, z in spikes.items() if "loss" in z or "local_grad_norm" in z)
                post = sorted(r for r, z in spikes.items() if "grad_norm" in z)
                suspected = own or (post if len(post) < self.world else list(range(self.world)))
                alarms.append(self._alarm("spike", suspected, z_scores=spikes, threshold=self.z_threshold))
            else:  # only clean steps enter the windows
                for hist, x in observed:
                    hist.append(x)
        return alarms

    def check_replay(self, recompute: Callable[[], None]) -> list[Alarm]:
        """Recompute the step with ``recompute`` (it must zero the gradients, restore the RNG state,
        and run forward and backward on the same batch) and compare gradients bitwise (collective)."""
        if not self.replay:
            return []
        saved = [None if p.grad is None else local_tensor(p.grad).detach().clone() for p in self.params]
        recompute()
        self._replays += 1
        if self._replays == 1:
            # DDP rebuilds its gradient buckets after a process's first backward, which changes the
            # all-reduce's summation order: the first recomputation of a process differs by ~1e-9 on a
            # clean step, so it only warms up
            for s, p in zip(saved, self.params, strict=True):
                if s is not None and p.grad is not None:
                    local_tensor(p.grad).copy_(s)
            return []
        differs, diff = False, 0.0
        for s, p in zip(saved, self.params, strict=True):
            if s is None or p.grad is None or _bitwise_equal(s, local_tensor(p.grad)):
                continue
            differs = True
            d = (s.double() - local_tensor(p.grad).double()).abs()
            finite = d[torch.isfinite(d)]
            diff = max(diff, float(finite.max()) if finite.numel() else math.inf)
        flag = torch.tensor([float(differs), diff if math.isfinite(diff) else -1.0], dtype=torch.float64)
        rows = [torch.zeros_like(flag) for _ in range(self.world)]
        dist.all_gather(rows, flag)
        bad = [r for r in range(self.world) if rows[r][0] > 0]
        for s, p in zip(saved, self.params, strict=True):  # apply what the step computed first; the caller reacts
            if s is not None and p.grad is not None:
                local_tensor(p.grad).copy_(s)
        if not bad:
            return []
        return [self._alarm("replay", bad, max_abs_diff={r: float(rows[r][1]) for r in bad})]

    def check_replicas(self, force: bool = False) -> list[Alarm]:
        """Every ``digest_every`` steps (or now, with ``force``), compare parameter digests across ranks
        (collective). After another detector's alarm, a forced comparison tells which replica is odd."""
        if not force and (self.digest_every <= 0 or self.step % self.digest_every):
            return []
        mine = torch.tensor([replica_digest(self.params)], dtype=torch.int64)
        rows = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine)
        digests = [int(r) for r in rows]
        counts: dict[int, int] = {}
        for d in digests:
            counts[d] = counts.get(d, 0) + 1
        if len(counts) == 1:
            return []
        top = max(counts.values())
        majority = [d for d, c in counts.items() if c == top]
        suspected = [r for r, d in enumerate(digests) if len(majority) > 1 or d != majority[0]]
        return [self._alarm("digest", suspected, digests={r: f"{d:016x}" for r, d in enumerate(digests)})]
