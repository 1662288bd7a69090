"""Fault families. ``FAULTS`` maps a scenario's ``fault:`` name to its class."""

from __future__ import annotations

from chaos.faults.base import Fault, FaultEnv
from chaos.faults.process import Kill
from chaos.scenario import FaultSpec

FAULTS: dict[str, type] = {"kill": Kill}

FAULT_DOCS: dict[str, str] = {
    "kill": "send a signal (SIGKILL default, SIGTERM, ...) to a rank, every worker of a node, or a node's agent",
}


def build_fault(spec: FaultSpec, index: int) -> Fault:
    """The fault object for schedule entry ``index``."""
    cls = FAULTS[spec.fault]
    fault: Fault = cls(spec, f"f{index}")
    return fault


__all__ = ["FAULTS", "FAULT_DOCS", "Fault", "FaultEnv", "build_fault"]
