"""In-process faults: the probe inside the target carries them out. Silent data corruption (gradient,
parameter) and the device faults (gpu-hang, gpu-slow, comm-abort, gil-hang: :mod:`chaos.probe.device_faults`).

The runner only passes them to the workers (``$CHAOS_SDC``, see :mod:`chaos.probe.sdc`) and learns
that one fired from the worker's ``sdc_inject`` or ``device_fault`` event; there is nothing to inject or
heal from outside.
"""

from __future__ import annotations

from typing import Any

from chaos.errors import ChaosError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.scenario import GradientFault, ParameterFault
from chaos.scenario.device_faults import DeviceFaultSpec

ProbeFaultSpec = GradientFault | ParameterFault | DeviceFaultSpec


class InProcess(SpecFault):
    """Runner-side handle of a fault the probe carries out (SDC or device)."""

    instant = True
    in_process = True

    def __init__(self, spec: ProbeFaultSpec, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: ProbeFaultSpec = spec

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return {self.spec.select.rank} if self.spec.select.rank is not None else None

    def ready(self, env: FaultEnv) -> bool:
        return False  # fired by the probe, never by the nemesis

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        raise ChaosError(f"{self.id}: in-process faults are injected by the probe, not the runner")

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        return None

    def sdc_json(self) -> dict[str, Any]:
        return self.spec.sdc_json(self.id)

    def probe_spec(self) -> dict[str, Any] | None:
        return self.sdc_json()
