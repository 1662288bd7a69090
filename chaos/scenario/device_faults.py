"""The device faults of ``schedule:`` (issue 19): a stalled or slowed accelerator, an aborted communicator
and a thread holding the GIL, each on one rank at the start of one step. The probe inside the target
carries them out (:mod:`chaos.probe.device_faults`), as it does the SDC faults; each has a meaning on CPU
too (a host stall, a slow rank, the gloo connections shut), so all of them are testable without a GPU."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from chaos.scenario.trigger import _InProbe

DEFAULT_HANG_S = 600.0  # long past any collective timeout worth testing: the job must end it, not the fault


class _OnOneRank(_InProbe):
    """What the device faults share: one rank (``select: {rank: R}``) and one step (``trigger: {at_step:
    N}``) at whose start the probe acts."""

    _RULES = ("select: a device fault acts on one rank; use select: {rank: R}",
              "trigger: a device fault acts at the start of a step; use trigger: {at_step: N}")

    def _where(self) -> str:
        return f"on rank {self.select.rank} {self.trigger.describe()}"


class GpuHangFault(_OnOneRank):
    """Rank R's device stalls for ``duration_s`` at the start of step N, so its next collective never starts:
    on CUDA a spinning kernel on the current stream (``torch.cuda._sleep``), on CPU a sleep of the training
    thread (the GIL released). The peers wait in their collective until their timeout (NCCL's watchdog, gloo's)."""

    fault: Literal["gpu-hang"]
    duration_s: float = Field(default=DEFAULT_HANG_S, gt=0, description="How long the device stalls, seconds.")

    def describe(self) -> str:
        return f"stall the device for {self.duration_s:g} s {self._where()}"


class GpuSlowFault(_OnOneRank):
    """Rank R's every step from N on (``steps`` of them) takes ``delay_ms`` longer before its forward pass: a
    straggler. On CUDA a calibrated spinning kernel on the current stream, on CPU a sleep of the training thread."""

    fault: Literal["gpu-slow"]
    delay_ms: float = Field(gt=0, description="Added to each step of the rank, milliseconds.")
    steps: int = Field(default=10**9, ge=1, description="Steps slowed, from step N on (default: to the end).")

    def describe(self) -> str:
        span = "" if self.steps >= 10**9 else f" for {self.steps} steps"
        return f"slow every step by {self.delay_ms:g} ms {self._where()}{span}"


class CommAbortFault(_OnOneRank):
    """Rank R's default process group is aborted at the start of step N, so its next collective raises and
    the job must restart and restore: NCCL's ``_abort_process_group()`` (``destroy_process_group()`` where
    torch has no abort); on gloo, whose abort is a no-op in torch, the rank's gloo connections are shut
    (``shutdown(2)``)."""

    fault: Literal["comm-abort"]

    def describe(self) -> str:
        return f"abort the process group {self._where()}"


class GilHangFault(_OnOneRank):
    """A thread of rank R takes the GIL at the start of step N and holds it for ``duration_s`` (one C call
    that never releases it): the Python training thread stops, while C++ threads (NCCL's watchdog, gloo's)
    run on."""

    fault: Literal["gil-hang"]
    duration_s: float = Field(default=DEFAULT_HANG_S, gt=0, description="How long the GIL is held, seconds.")

    def describe(self) -> str:
        return f"hold the GIL for {self.duration_s:g} s {self._where()}"


DeviceFaultSpec = GpuHangFault | GpuSlowFault | CommAbortFault | GilHangFault
