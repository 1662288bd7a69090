"""Fault implementations. ``FAULTS`` maps a scenario's ``fault:`` name to its class (network and disk
faults are imported on first use); the kinds and their traits are the table in :mod:`chaos.kinds`."""

from __future__ import annotations

from chaos import kinds
from chaos.faults.base import Fault, FaultEnv
from chaos.faults.checkpoint import CheckpointDamage
from chaos.faults.process import Kill, NodeCrash, NodeRestart, Pause
from chaos.faults.sdc import InProcess
from chaos.scenario import FaultSpec

FAULTS: dict[str, type] = {"kill": Kill, "gradient": InProcess, "parameter": InProcess, "pause": Pause,
                           "node-crash": NodeCrash, "node-restart": NodeRestart, "checkpoint": CheckpointDamage}

FAULT_DOCS = kinds.FAULT_DOCS  # one line per kind, from the kinds table


def fault_class(name: str) -> type:
    """The class for a ``fault:`` name (network faults are imported on first use)."""
    if kinds.row(name).network:
        from chaos.faults.network import NETWORK_FAULT_CLASSES

        return NETWORK_FAULT_CLASSES[name]
    if name == "disk":
        from chaos.faults.disk import Disk

        return Disk
    if name not in FAULTS:  # a third-party fault (entry point group chaos.faults); loaded when validated
        from chaos.plugins import fault_plugin

        plugin = fault_plugin(name)
        if plugin is not None:
            return plugin.fault
    return FAULTS[name]


def build_fault(spec: FaultSpec, index: int) -> Fault:
    """The fault object for schedule entry ``index``."""
    fault: Fault = fault_class(spec.fault)(spec, f"f{index}")
    return fault


__all__ = ["FAULTS", "FAULT_DOCS", "Fault", "FaultEnv", "build_fault", "fault_class"]
