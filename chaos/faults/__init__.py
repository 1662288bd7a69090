"""Fault implementations. ``FAULTS`` maps a scenario's ``fault:`` name to its class (network and disk
faults are imported on first use); the kinds and their traits are the table in :mod:`chaos.kinds`."""

from __future__ import annotations

from chaos import kinds
from chaos.faults.base import Fault, FaultEnv, SpecFault
from chaos.faults.checkpoint import CheckpointDamage
from chaos.faults.lighthouse import LighthousePartition
from chaos.faults.process import Kill, NodeCrash, NodeRestart, Pause
from chaos.faults.sdc import InProcess
from chaos.faults.slurm import SlurmdKill, SlurmDown, SlurmDrain, SlurmRequeue, SlurmSignal
from chaos.scenario import FaultSpec

FAULTS: dict[str, type] = {"kill": Kill, "gradient": InProcess, "parameter": InProcess, "pause": Pause,
                           "node-crash": NodeCrash, "node-restart": NodeRestart, "checkpoint": CheckpointDamage,
                           "slurm-down": SlurmDown, "slurm-signal": SlurmSignal, "slurm-requeue": SlurmRequeue,
                           "slurm-drain": SlurmDrain, "slurmd-kill": SlurmdKill,
                           "lighthouse-partition": LighthousePartition}

FAULT_DOCS = kinds.FAULT_DOCS  # one line per kind, from the kinds table


def fault_class(name: str) -> type:
    """The class for a ``fault:`` name (network faults are imported on first use). Raises
    :class:`~chaos.plugins.PluginError` for a plugin fault whose class is not a :class:`SpecFault`."""
    if name in kinds.BY_NAME and kinds.kind(name).network:
        from chaos.faults.network import NETWORK_FAULT_CLASSES

        return NETWORK_FAULT_CLASSES[name]
    if name == "disk":
        from chaos.faults.disk import Disk

        return Disk
    if name not in FAULTS:  # a third-party fault (entry point group chaos.faults); loaded when validated
        from chaos.plugins import FAULT_GROUP, PluginError, fault_plugin

        plugin = fault_plugin(name)
        if plugin is not None:
            if not issubclass(plugin.fault, SpecFault):
                raise PluginError(FAULT_GROUP, name, f"fault plugin {name!r}: its fault class "
                                  f"{plugin.fault.__qualname__} must subclass chaos.faults.base.SpecFault (the "
                                  "contract the nemesis reads: traits, inject, heal, prepare/teardown)")
            return plugin.fault
    return FAULTS[name]


def build_fault(spec: FaultSpec, index: int) -> Fault:
    """The fault object for schedule entry ``index``."""
    fault: Fault = fault_class(spec.fault)(spec, f"f{index}")
    return fault


__all__ = ["FAULTS", "FAULT_DOCS", "Fault", "FaultEnv", "build_fault", "fault_class"]
