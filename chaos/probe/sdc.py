"""Silent data corruption injected inside the target: gradient and parameter faults.

The runner passes the scenario's in-process faults to every worker in ``$CHAOS_SDC`` (a JSON list);
the :class:`Injector` applies the ones that name this rank, at the steps they name, and records an
``sdc_inject`` event with exactly what it changed (parameter, flat indices, old and new values).

Where a gradient fault lands:
  ``local``   on this rank's own gradient, before DDP's all-reduce (a tensor hook on the parameter),
              so every replica receives the corruption through the average;
  ``replica`` on this rank's gradient after the all-reduce (call :meth:`Injector.after_backward`),
              so only this replica applies it and the replicas diverge.
A parameter fault flips a bit of a weight in memory after the optimizer step
(:meth:`Injector.after_step`).

On a sharded model (FSDP2: every parameter a ``DTensor``) a fault changes this rank's local shard;
``local`` gradient faults are refused there (``sdc_fault_invalid``): FSDP sets a sharded parameter's
gradient after its reduce-scatter, so no hook sees the rank's own gradient before the reduction.

A fault with ``steps: N`` fires on N step executions (persistent); ``steps: 1`` is transient. A step
executed again after a rollback counts as a new execution, so a transient fault does not come back.
The injector draws its choices from its own seeded ``random.Random`` and never touches torch's RNG,
so injecting does not change the job's data order or dropout masks. A CUDA tensor is corrupted on its
device (index, mask and noise tensors made there); only the few values the event shows are copied to the host.

The injector also carries out this rank's device faults (gpu-hang, gpu-slow, comm-abort, gil-hang:
:mod:`chaos.probe.device_faults`) at the start of their step, and times each step's own compute (from
:meth:`Injector.begin_step` to the end of the model's first forward: :mod:`chaos.probe.compute`), which the
next ``step`` event carries as ``compute_ms``.

Usage in a training loop::

    inj = sdc.Injector.from_env(probe.get(), ddp_model)
    inj.begin_step(step)
    loss.backward()          # local faults land here, through the parameter hooks
    inj.after_backward()     # replica faults
    opt.step()
    inj.after_step()         # parameter faults
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass
from typing import Any

import torch

from chaos.probe import Probe, local_tensor
from chaos.probe.compute import ComputeTimer
from chaos.probe.device_faults import DEVICE_KINDS, DeviceFault, DeviceFaults

BITS = {"sign": 31, "exponent": 30, "mantissa": 0}
MODES = ("bitflip", "nan", "inf", "scale", "noise")


@dataclass
class SdcFault:
    """One in-process fault, as the runner passes it (see ``chaos.scenario.GradientFault``)."""

    id: str
    kind: str  # "gradient" or "parameter"
    rank: int
    step: int
    steps: int = 1
    mode: str = "bitflip"
    bit: int = BITS["exponent"]
    where: str = "replica"
    param: str | None = None
    elements: int = 1
    fraction: float | None = None
    factor: float = 1000.0
    magnitude: float = 0.1
    fired: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SdcFault:
        data = dict(data)
        bit = data.get("bit", "exponent")
        data["bit"] = BITS[bit] if isinstance(bit, str) else int(bit)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _flip(values: torch.Tensor, bit: int) -> torch.Tensor:
    if values.dtype != torch.float32:
        raise TypeError(f"bitflip supports float32 tensors, got {values.dtype}")
    mask = torch.tensor(-(1 << 31) if bit == 31 else (1 << bit), dtype=torch.int32, device=values.device)
    return (values.view(torch.int32) ^ mask).view(torch.float32)


class Injector:
    """Applies this rank's SDC faults (``faults``) and device faults (``device_faults``), and times its steps'
    compute (when the probe is enabled). Every method is a no-op when there is nothing to inject."""

    def __init__(self, probe: Probe, model: torch.nn.Module, faults: list[SdcFault],
                 device_faults: list[DeviceFault] | None = None) -> None:
        self.probe = probe
        self.rank = probe.rank
        module = getattr(model, "module", model)
        self.params: dict[str, torch.nn.Parameter] = dict(module.named_parameters())
        device = next(iter(self.params.values())).device if self.params else None
        self.device_faults = DeviceFaults(probe, device_faults or [], device)
        self.timer = ComputeTimer(probe, module, device) if probe.enabled else None
        self.faults = []
        for f in faults:
            if f.rank != self.rank:
                continue
            if f.param is not None and f.param not in self.params:
                probe.emit("sdc_fault_invalid", fault_id=f.id, reason=f"param={f.param!r} is not a parameter of the "
                           f"model; use one of: {', '.join(self.params)}")
                continue
            self.faults.append(f)
        self.step = 0
        self.execution = 0
        self._done: set[tuple[str, int]] = set()  # (fault id, execution) already injected
        if any(f.kind == "gradient" and f.where == "local" for f in self.faults) and any(
                local_tensor(p) is not p for p in self.params.values()):
            # FSDP2's sharded parameters get their gradient after the reduce-scatter, set by FSDP
            # itself: no tensor hook on them sees a rank's own gradient before the reduction
            for f in [f for f in self.faults if f.kind == "gradient" and f.where == "local"]:
                probe.emit("sdc_fault_invalid", fault_id=f.id, reason="where: local needs a hook on this rank's "
                           "gradient before the reduction, and the model's parameters are sharded (DTensor, "
                           "e.g. FSDP2) so none sees it: use where: replica (this rank's shard of the reduced "
                           "gradient)")
                self.faults.remove(f)
        for name, p in self.params.items():
            if any(f.kind == "gradient" and f.where == "local" for f in self.faults):
                p.register_hook(self._local_hook(name))

    @classmethod
    def from_env(cls, probe: Probe, model: torch.nn.Module) -> Injector:
        """The injector for ``$CHAOS_SDC`` (empty outside a chaos run)."""
        raw = os.environ.get("CHAOS_SDC", "[]") if probe.enabled else "[]"
        entries = json.loads(raw)
        return cls(probe, model, [SdcFault.from_json(f) for f in entries if f.get("kind") not in DEVICE_KINDS],
                   [DeviceFault.from_json(f) for f in entries if f.get("kind") in DEVICE_KINDS])

    def begin_step(self, step: int) -> None:
        """Step ``step`` (1-based) begins; call before its forward pass. Starts the step's compute timing,
        then carries out the device faults due at it (a gpu-hang or gil-hang stalls the caller here)."""
        if self.timer is not None:
            self.timer.begin(step)
        self.step = step
        self.execution += 1
        if self.device_faults.faults:
            self.device_faults.begin_step(step)

    def _due(self, kind: str, where: str | None = None) -> list[SdcFault]:
        return [
            f for f in self.faults
            if f.kind == kind and (where is None or f.where == where) and f.fired < f.steps
            and self.step >= f.step and (f.id, self.execution) not in self._done
        ]

    def _local_hook(self, name: str) -> Any:
        def hook(grad: torch.Tensor) -> torch.Tensor | None:
            for f in self._due("gradient", "local"):
                if self._target_name(f) == name:
                    grad = grad.clone()
                    self._corrupt(f, name, grad)
                    return grad
            return None

        return hook

    def after_backward(self) -> None:
        """Apply ``replica`` gradient faults (after DDP's all-reduce, before the optimizer step)."""
        for f in self._due("gradient", "replica"):
            name = self._target_name(f)
            grad = self.params[name].grad
            if grad is not None:
                self._corrupt(f, name, grad)

    def after_step(self) -> None:
        """Apply parameter faults (after the optimizer step)."""
        for f in self._due("parameter"):
            name = self._target_name(f)
            with torch.no_grad():
                self._corrupt(f, name, self.params[name].data)

    def _rng(self, f: SdcFault) -> random.Random:
        return random.Random(f"{f.id}:{f.fired}:{self.rank}")

    def _target_name(self, f: SdcFault) -> str:
        if f.param is not None:
            return f.param
        names = sorted(self.params)
        return names[self._rng(f).randrange(len(names))]

    def _corrupt(self, f: SdcFault, name: str, tensor: torch.Tensor) -> None:
        tensor = local_tensor(tensor)  # a sharded tensor: this rank's shard (a view: the change lands in place)
        rng = self._rng(f)
        flat = tensor.view(-1)
        count = max(1, round(f.fraction * flat.numel())) if f.fraction is not None else min(f.elements, flat.numel())
        indices = sorted(rng.sample(range(flat.numel()), count)) if count < flat.numel() else list(range(flat.numel()))
        idx = torch.tensor(indices, dtype=torch.long, device=flat.device)
        old = flat[idx].clone()
        if f.mode == "bitflip":
            new = _flip(old, f.bit)
        elif f.mode == "nan":
            new = torch.full_like(old, math.nan)
        elif f.mode == "inf":
            new = torch.full_like(old, math.inf)
        elif f.mode == "scale":
            new = old * f.factor
        elif f.mode == "noise":
            noise = torch.tensor([rng.gauss(0.0, 1.0) for _ in indices], dtype=old.dtype, device=old.device)
            new = old * (1 + f.magnitude * noise)
        else:
            raise ValueError(f"unknown SDC mode {f.mode!r}; use one of {MODES}")
        flat[idx] = new
        f.fired += 1
        self._done.add((f.id, self.execution))
        shown = min(len(indices), 8)
        self.probe.emit(
            "sdc_inject", step=self.step, fault_id=f.id, fault=f.kind, mode=f.mode, where=f.where if f.kind == "gradient"
            else "parameter", param=name, elements=len(indices), indices=indices[:shown],
            old=[float(v) for v in old[:shown].tolist()], new=[float(v) for v in new[:shown].tolist()],
            bit=f.bit if f.mode == "bitflip" else None, injection=f.fired, of=f.steps,
        )
