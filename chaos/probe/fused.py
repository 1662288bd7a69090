"""A few numbers per rank carried in DDP's own gradient all-reduce (a communication hook), so the SDC
detectors learn every rank's flags without a collective of their own.

DDP calls the hook once per gradient bucket, in bucket order, with this rank's local gradients
(undivided: with a hook registered, dividing is the hook's job). For each bucket the hook

1. measures it: the float64 sum of squares of this rank's local gradient before the all-reduce, and
   whether it is finite (per parameter when it is not) — what per-parameter hooks measured before;
2. scales it by ``1 / world`` the way DDP's built-in all-reduce does (a multiply by the scalar, not a
   division), so the gradients come out as without the hook;
3. on the step's last bucket, appends ``fields × world`` slots in the bucket's dtype: field ``f`` of
   rank ``r`` sits at ``f * world + r``; each rank writes its own slots and zeros elsewhere, so the
   summing all-reduce is a gather of every rank's numbers;
4. all-reduces (sum) in one collective, strips the slots, and keeps the reduced bucket's views, so
   :meth:`GradientChannel.changed_after_reduce` can tell whether this rank's gradient was changed
   after the all-reduce.

Bitwise: with 2 ranks the reduced gradients equal DDP's built-in ones bit for bit (a sum of two is
commutative). With more ranks gloo's ring all-reduce assigns each segment of the (now longer) last
bucket to a rank by position, so some elements are summed in another order than without the hook:
the job stays deterministic, and a reference run with the same detectors matches it bitwise.

Memory: the reduced buffers of the last backward (one gradient's size) are kept until the next step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist

FUSABLE_DTYPES = (torch.float32, torch.float64)  # a flag or log-norm survives the trip in these


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def sum_sq(flat: torch.Tensor) -> float:
    """The float64 sum of squares of a 1-D tensor (NaN or Inf when it holds one)."""
    d = flat.detach().double()
    return float(torch.dot(d, d))


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bits as integers of the same size (a view where ``t`` is contiguous): NaN equals NaN bitwise."""
    return t.reshape(-1).view(_BITS[t.element_size()])


class GradientChannel:
    """The comm hook on one DDP model. ``outbox()`` is called on the first backward of each step (after
    :meth:`reset`) when the last bucket is about to be sent, and returns this rank's ``fields`` values;
    after that backward, :attr:`table` holds every rank's (``fields × world``, float64).

    Raises ``RuntimeError`` (from DDP) when the model already has a communication hook.
    """

    def __init__(self, model: torch.nn.Module, fields: int, outbox: Callable[[], list[float]]) -> None:
        self.group: dist.ProcessGroup = getattr(model, "process_group", None) or dist.group.WORLD  # type: ignore[assignment]
        self.rank, self.world = self.group.rank(), self.group.size()
        self.fields = fields
        self.outbox = outbox
        self.local_bad = False  # this step's local gradient had a NaN/Inf (first backward)
        self.local_sq = 0.0  # float64 sum of squares of its finite parameters' gradients
        self.table: torch.Tensor | None = None  # fields × world, float64: every rank's outbox this step
        self.reduced: list[tuple[torch.Tensor, torch.Tensor]] = []  # (parameter, its reduced gradient)
        self.reduced_sq = 0.0  # float64 sum of squares of the reduced gradient (the same on every rank)
        self.backwards = 0  # backward passes (last buckets sent) since reset()
        self._bad, self._sq = False, 0.0  # accumulating over the buckets of the current backward
        self._layouts: dict[tuple[int, int, int], list[tuple[torch.Tensor, int, torch.Size]]] = {}

        def hook(state, bucket):  # no annotations: DDP checks annotations against the real types
            return self._hook(bucket)

        model.register_comm_hook(None, hook)  # type: ignore[operator]

    def reset(self) -> None:
        """A new step: forget the last one's numbers."""
        self.local_bad, self.local_sq, self.table, self.reduced, self.reduced_sq = False, 0.0, None, [], 0.0
        self.backwards = 0
        self._bad, self._sq = False, 0.0

    def _measure(self, bucket: dist.GradBucket) -> None:
        sq = sum_sq(bucket.buffer())
        if math.isfinite(sq):
            self._sq += sq
            return
        for g in bucket.gradients():  # which parameters: the finite ones still count towards the norm
            s = sum_sq(g.reshape(-1))
            if math.isfinite(s):
                self._sq += s
            else:
                self._bad = True

    def _hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        n = buffer.numel()
        first = self.backwards == 0
        if first:
            self._measure(bucket)
        buffer.mul_(1.0 / self.world)  # as DDP's built-in all-reduce scales (mul by the wrapped scalar)
        payload, last = buffer, bucket.is_last()
        if last:
            if first:
                self.local_bad, self.local_sq = self._bad, self._sq
            values = self.outbox() if first else [0.0] * self.fields
            tail = torch.zeros(self.fields * self.world, dtype=buffer.dtype, device=buffer.device)
            tail[self.rank::self.world] = torch.tensor(values, dtype=torch.float64).to(buffer.dtype)
            payload = torch.cat([buffer, tail])
            self.backwards += 1
            self._bad, self._sq = False, 0.0
        views = self._layout(bucket, buffer) if first else []

        def done(result: torch.Tensor) -> torch.Tensor:
            reduced = result[:n]
            if first:
                self.reduced += [(p, reduced[off:off + shape.numel()].view(shape)) for p, off, shape in views]
                self.reduced_sq += sum_sq(reduced)
                if last:
                    self.table = result[n:].double().view(self.fields, self.world)
            return reduced

        work = self.group.allreduce([payload])  # SUM; the process group's own call (no Python wrapper)
        if not last:  # overlaps with the rest of the backward pass, as DDP's own all-reduce does
            return work.get_future().then(lambda fut: done(fut.value()[0]))
        # the last bucket: nothing is left to overlap, so wait here and hand DDP a finished future
        # (no callback on the communication thread, whose hand-over costs more than the collective)
        work.wait()
        out: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        out.set_result(done(payload))
        return out

    def _layout(self, bucket: dist.GradBucket, buffer: torch.Tensor) -> list[tuple[torch.Tensor, int, torch.Size]]:
        """(parameter, offset, shape) of each gradient in ``bucket``'s buffer (cached per buffer: DDP
        rebuilds its buckets once, after the first backward, with new buffers)."""
        key = (bucket.index(), buffer.data_ptr(), buffer.numel())
        layout = self._layouts.get(key)
        if layout is None:
            layout = [(p, int(g.storage_offset() - buffer.storage_offset()), g.shape)
                      for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True)]
            self._layouts[key] = layout
        return layout

    def changed_after_reduce(self) -> bool:
        """Whether any parameter's ``.grad`` differs bitwise from what this step's all-reduce delivered
        for it: a change on this rank after the all-reduce (False before any all-reduce this step)."""
        for p, reduced in self.reduced:
            grad = p.grad
            if grad is not None and not torch.equal(as_bits(grad.detach()), as_bits(reduced)):
                return True
        return False
