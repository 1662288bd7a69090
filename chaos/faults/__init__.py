"""Fault families. ``FAULTS`` maps a scenario's ``fault:`` name to its class."""

from __future__ import annotations

from chaos.faults.base import Fault, FaultEnv
from chaos.faults.process import Kill
from chaos.faults.sdc import InProcess
from chaos.scenario import FaultSpec

FAULTS: dict[str, type] = {"kill": Kill, "gradient": InProcess, "parameter": InProcess}

FAULT_DOCS: dict[str, str] = {
    "kill": "send a signal (SIGKILL default, SIGTERM, ...) to a rank, every worker of a node, or a node's agent",
    "gradient": "SDC in one rank's gradient (bitflip, nan, inf, scale, noise), before (local) or after "
                "(replica) the all-reduce, for one step or N; carried out by the probe",
    "parameter": "SDC: a bitflip in one rank's weight in memory after the optimizer step; carried out by the probe",
}


def build_fault(spec: FaultSpec, index: int) -> Fault:
    """The fault object for schedule entry ``index``."""
    cls = FAULTS[spec.fault]
    fault: Fault = cls(spec, f"f{index}")
    return fault


__all__ = ["FAULTS", "FAULT_DOCS", "Fault", "FaultEnv", "build_fault"]
