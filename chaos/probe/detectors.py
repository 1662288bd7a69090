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

How the numbers travel. By default each check gathers every rank's numbers in one small
``all_gather`` per step (per-parameter hooks measure the local gradient). With ``fused=True``, on a
``DistributedDataParallel`` model (fp32/fp64) the nonfinite and spike numbers ride in the gradient
all-reduce the job does anyway (:mod:`chaos.probe.fused`, a DDP
communication hook): each rank's local-gradient flag and norm (measured per bucket, no per-parameter
hooks) and its loss (call :meth:`SdcDetectors.before_backward`) reach every rank in the same step,
and :meth:`SdcDetectors.check_gradients` runs no collective. The all-reduced gradient is the same on
every rank, so its norm needs no exchange; a rank's gradient changed *after* the all-reduce (a
corruption only that rank sees) is noticed by that rank in the same step and reported in the next
all-reduce, or in the digest comparison if that comes first (so before a checkpoint that follows
it): the alarm names that rank and the step of the change, one step later in time. Opt in knowing
what that costs: a corruption after the all-reduce is raised a step later, and with 3 or more ranks
the longer last bucket moves gloo's ring segments, so the gradients are deterministic but no longer
bitwise those of DDP's own all-reduce (with 2 ranks they are). Where fusing cannot apply (FSDP2, a
module that is not the DDP wrapper — e.g. Lightning's callback gets the LightningModule —, a model
with its own comm hook, fp16/bf16 parameters, or a step whose loss was not given) the numbers are
gathered as by default.

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
from torch.nn.parallel import DistributedDataParallel

from chaos.probe import Probe, local_tensor
from chaos.probe.fused import FUSABLE_DTYPES, GradientChannel
from chaos.probe.hostbytes import host_chunks

Alarm = dict[str, Any]


def replica_digest(params: list[torch.Tensor]) -> int:
    """A 63-bit CRC-based digest of the parameters' bytes (cheap enough to run every few steps); the same
    for the same bits on the CPU or a GPU (read with one device-to-host copy per chunk, not per tensor)."""
    crc, adler = 0, 1
    for data in host_chunks(params):
        crc = zlib.crc32(data, crc)
        adler = zlib.adler32(data, adler)
    return ((crc << 31) ^ adler) & ((1 << 63) - 1)


def comm_device() -> torch.device:
    """Where the detectors' own small collectives keep their tensors: the host, unless the default process
    group cannot carry host tensors (NCCL alone: then this rank's current CUDA device)."""
    try:
        types = {d.type for d in dist.distributed_c10d._get_default_group()._device_types}
    except Exception:  # a torch without these internals: the host, as gloo wants
        return torch.device("cpu")
    return torch.device("cpu") if "cpu" in types or "cuda" not in types else torch.device("cuda", torch.cuda.current_device())


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def log_norm(sq: float) -> float:
    """log10 of the norm whose square is ``sq`` (−30 for 0 or NaN: no norm to judge)."""
    return math.log10(math.sqrt(sq)) if sq > 0 else -30.0


def log_loss(loss: float) -> float:
    """log10 of a loss (−30 for a loss ≤ 0 or NaN)."""
    return math.log10(loss) if loss > 0 else -30.0


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


def upward_z(value: float, history: deque[float]) -> float:
    """:func:`robust_z` where ``value`` is above the history's median, else 0 (no upward spike: the
    median absolute deviation is not computed)."""
    data = sorted(history)
    n = len(data)
    return robust_z(value, history) if value > (data[n // 2] + data[(n - 1) // 2]) / 2 else 0.0


_FIELDS = 7  # what each rank sends in the gradient all-reduce, see SdcDetectors._outbox


class SdcDetectors:
    """The detectors of one rank. Create after wrapping the model in DDP (pass the wrapper: then the
    numbers ride in its all-reduce); call, on every rank:

    - :meth:`begin_step` before the forward pass;
    - :meth:`before_backward` with the loss, before ``backward()`` (with DDP: it lets the loss ride in
      the gradient all-reduce; without it a step gathers the numbers in a collective of its own);
    - :meth:`check_gradients` after ``backward()`` and before ``optimizer.step()``;
    - :meth:`check_replay` after :meth:`check_gradients`, when ``replay`` is on;
    - :meth:`check_replicas` after ``optimizer.step()``.

    Each returns the alarms (empty when all is well); the caller decides how to react.
    """

    def __init__(self, probe: Probe, model: torch.nn.Module, *, nonfinite: bool = True, spike: bool = True,
                 digest_every: int = 10, replay: bool = False, window: int = 100, warmup: int = 50,
                 z_threshold: float = 8.0, fused: bool = False) -> None:
        self.probe = probe
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = comm_device()  # of the numbers the detectors gather (host tensors, unless NCCL alone)
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
        self._loss: torch.Tensor | None = None
        self._checked = 0  # the step of the last check_gradients
        self._pending: tuple[bool, float] | None = None  # this rank's gradient changed after the last
        # all-reduce (non-finite?, log10 norm), not yet reported to the others
        self._report_step = 0  # the step the reports in this step's all-reduce are about
        self.enabled = nonfinite or spike or replay or digest_every > 0
        self.channel: GradientChannel | None = None
        if (nonfinite or spike) and not self.sharded:  # a sharded parameter's hook never sees a local gradient
            if (fused and isinstance(model, DistributedDataParallel) and model.process_group.size() == self.world
                    and all(p.dtype in FUSABLE_DTYPES for p in self.params)):
                try:
                    self.channel = GradientChannel(model, _FIELDS, self._outbox)
                except (RuntimeError, ValueError):  # the job has its own communication hook: gather instead
                    self.channel = None
            if self.channel is None:
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

    def _outbox(self) -> list[float]:
        """This rank's numbers for the gradient all-reduce: local gradient non-finite, its log10 norm,
        the loss, whether the loss was given, and a report of a change after the last all-reduce
        (reported, non-finite, log10 norm)."""
        ch = self.channel
        assert ch is not None
        report, self._pending, self._report_step = self._pending, None, self._checked
        return [float(ch.local_bad), log_norm(ch.local_sq), float(self._loss) if self._loss is not None else 0.0,
                float(self._loss is not None), float(report is not None), float(report is not None and report[0]),
                report[1] if report is not None else 0.0]

    def begin_step(self, step: int) -> None:
        self.step = step
        self._local_bad = False
        self._local_sq = 0.0
        self._loss = None
        if self.channel is not None:
            self.channel.reset()

    def before_backward(self, loss: torch.Tensor) -> None:
        """The step's loss, before ``backward()``: with DDP it rides in the gradient all-reduce."""
        self._loss = loss.detach()

    def _alarm(self, detector: str, suspected: list[int], step: int | None = None, **evidence: Any) -> Alarm:
        alarm = {"detector": detector, "suspected_ranks": suspected, "evidence": evidence}
        self.probe.emit("sdc_alarm", step=self.step if step is None else step, **alarm)
        return alarm

    def _post_sq(self) -> float:
        grads = [local_tensor(p.grad) for p in self.params if p.grad is not None]  # a sharded model: own shards
        return float(sum(g.detach().double().pow(2).sum() for g in grads)) if grads else 0.0

    def check_gradients(self, loss: torch.Tensor) -> list[Alarm]:
        """Non-finite and spike checks of this step's loss and gradients (collective unless the numbers
        came with the gradient all-reduce)."""
        if not (self.nonfinite or self.spike):
            return []
        ch = self.channel
        table = ch.table.tolist() if ch is not None and ch.table is not None else None
        alarms = [] if table is None else self._deferred(
            [(table[4][r] > 0, table[5][r] > 0, table[6][r]) for r in range(self.world)], self._report_step)
        if table is not None and all(v > 0 for v in table[3]):
            assert ch is not None
            reduced_bad, post_x = not math.isfinite(ch.reduced_sq), log_norm(ch.reduced_sq)
            rows = [(table[0][r] > 0, reduced_bad or not math.isfinite(table[2][r]), table[1][r], post_x,
                     log_loss(table[2][r])) for r in range(self.world)]
            now = self._judge(rows)
            if not now and ch.changed_after_reduce():  # only this rank sees it: report it in the next collective
                post_sq = self._post_sq()
                self._pending = (not math.isfinite(post_sq), log_norm(post_sq))
        else:
            now = self._judge(self._gather(loss))
        self._checked = self.step
        return alarms + now

    def _gather(self, loss: torch.Tensor) -> list[tuple[bool, bool, float, float, float]]:
        """Every rank's (local non-finite, reduced non-finite, local log norm, reduced log norm, log loss),
        gathered in a collective of its own."""
        ch = self.channel
        local_bad, local_sq = (ch.local_bad, ch.local_sq) if ch is not None else (self._local_bad, self._local_sq)
        post_sq = self._post_sq()
        loss_v = float(loss.detach())
        mine = torch.tensor([float(local_bad), float(not math.isfinite(post_sq) or not math.isfinite(loss_v)),
                             local_sq, post_sq, loss_v], dtype=torch.float64, device=self.device)
        rows = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine)
        rows = [t.cpu() for t in rows]
        return [(float(t[0]) > 0, float(t[1]) > 0, log_norm(float(t[2])), log_norm(float(t[3])), log_loss(float(t[4])))
                for t in rows]

    def _judge(self, rows: list[tuple[bool, bool, float, float, float]]) -> list[Alarm]:
        """Alarms from every rank's (local non-finite, reduced non-finite, local log norm, reduced log norm,
        log loss); a clean step's values enter the spike windows."""
        alarms: list[Alarm] = []
        if self.nonfinite:
            local = [r for r in range(self.world) if rows[r][0]]
            post = [r for r in range(self.world) if rows[r][1]]
            if local or post:
                alarms.append(self._alarm(
                    "nonfinite", local or post, where="local gradient before all-reduce" if local else
                    "loss or all-reduced gradient", local_ranks=local, reduced_ranks=post))
        if self.spike and not alarms:
            spikes: dict[int, dict[str, float]] = {}
            observed: list[tuple[deque[float], float]] = []
            for r in range(self.world):
                for x, what in ((rows[r][2], "local_grad_norm"), (rows[r][3], "grad_norm"), (rows[r][4], "loss")):
                    hist = self.windows.setdefault((what, r), deque(maxlen=self.window))
                    observed.append((hist, x))
                    if len(hist) >= self.warmup:
                        z = upward_z(x, hist)
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

    def _deferred(self, reports: list[tuple[bool, float | bool, float]], step: int) -> list[Alarm]:
        """Alarms at ``step`` for the ranks whose gradient changed after that step's all-reduce, from their
        reports (reported, non-finite, log10 norm of the changed gradient), one collective later."""
        changed = [r for r in range(self.world) if reports[r][0]]
        if not changed:
            return []
        where = "all-reduced gradient, changed on that rank after the all-reduce (reported one collective later)"
        bad = [r for r in changed if reports[r][1]]
        if self.nonfinite and bad:
            return [self._alarm("nonfinite", bad, step=step, where=where, local_ranks=[], reduced_ranks=bad)]
        spikes: dict[int, dict[str, float]] = {}
        for r in changed if self.spike else []:
            hist = self.windows.get(("grad_norm", r))
            if hist is not None and len(hist) >= self.warmup:
                z = upward_z(reports[r][2], hist)
                if z > self.z_threshold:
                    spikes[r] = {"grad_norm": round(z, 1)}
        if not spikes:
            return []
        post = sorted(spikes)
        return [self._alarm("spike", post if len(post) < self.world else list(range(self.world)), step=step,
                            z_scores=spikes, threshold=self.z_threshold, where=where)]

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
        flag = torch.tensor([float(differs), diff if math.isfinite(diff) else -1.0], dtype=torch.float64,
                            device=self.device)
        rows = [torch.zeros_like(flag) for _ in range(self.world)]
        dist.all_gather(rows, flag)
        rows = [t.cpu() for t in rows]
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
        mine = [replica_digest(self.params)]
        if self.channel is not None:  # a change after the last all-reduce not yet reported travels here first
            report, self._pending = self._pending, None
            bad, x = report if report is not None else (False, 0.0)
            mine += [int(report is not None), int(bad), int(torch.tensor([x], dtype=torch.float64).view(torch.int64))]
        rows = [torch.zeros(len(mine), dtype=torch.int64, device=self.device) for _ in range(self.world)]
        dist.all_gather(rows, torch.tensor(mine, dtype=torch.int64, device=self.device))
        rows = [t.cpu() for t in rows]
        alarms = [] if self.channel is None else self._deferred(
            [(bool(t[1]), bool(t[2]), float(t[3:4].view(torch.float64))) for t in rows], self._checked)
        digests = [int(t[0]) for t in rows]
        counts: dict[int, int] = {}
        for d in digests:
            counts[d] = counts.get(d, 0) + 1
        if len(counts) == 1:
            return alarms
        top = max(counts.values())
        majority = [d for d, c in counts.items() if c == top]
        suspected = [r for r, d in enumerate(digests) if len(majority) > 1 or d != majority[0]]
        return alarms + [self._alarm("digest", suspected, digests={r: f"{d:016x}" for r, d in enumerate(digests)})]
