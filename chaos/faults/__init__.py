"""Fault families. ``FAULTS`` maps a scenario's ``fault:`` name to its class."""

from __future__ import annotations

from chaos.faults.base import Fault, FaultEnv
from chaos.faults.checkpoint import CheckpointDamage
from chaos.faults.process import Kill, NodeCrash, NodeRestart, Pause
from chaos.faults.sdc import InProcess
from chaos.scenario import NETWORK_FAULTS, FaultSpec

FAULTS: dict[str, type] = {"kill": Kill, "gradient": InProcess, "parameter": InProcess, "pause": Pause,
                           "node-crash": NodeCrash, "node-restart": NodeRestart, "checkpoint": CheckpointDamage}

FAULT_DOCS: dict[str, str] = {
    "kill": "send a signal (SIGKILL default, SIGTERM, ...) to a rank, every worker of a node, or a node's agent",
    "pause": "freeze a rank (SIGSTOP/SIGCONT) or a whole node (every process; docker pause) for duration_s",
    "node-crash": "kill a whole node at once (agent + workers, or its container), optionally back after "
                  "restart_after_s",
    "node-restart": "start a crashed node again so it rejoins the rendezvous",
    "delay": "delay a node's outgoing packets (netem; NFQUEUE delayer where the kernel has no netem); netns/docker",
    "loss": "drop a share of a node's outgoing packets (netem; iptables -m statistic); netns/docker",
    "bandwidth": "cap a node's outgoing bandwidth (tc tbf); netns/docker",
    "partition": "split the nodes in two sides that cannot reach each other (iptables); netns/docker",
    "disk": "stall, slow or fail chosen file operations (write, fsync, rename, ...) on the checkpoint directory, "
            "optionally of one rank, through a FUSE pass-through filesystem",
    "checkpoint": "damage the newest checkpoint between its save and the next load: corrupt bytes, truncate, "
                  "delete its metadata",
    "gradient": "SDC in one rank's gradient (bitflip, nan, inf, scale, noise), before (local) or after "
                "(replica) the all-reduce, for one step or N; carried out by the probe",
    "parameter": "SDC: a bitflip in one rank's weight in memory after the optimizer step; carried out by the probe",
}


def fault_class(name: str) -> type:
    """The class for a ``fault:`` name (network faults are imported on first use)."""
    if name in NETWORK_FAULTS:
        from chaos.faults.network import NETWORK_FAULT_CLASSES

        return NETWORK_FAULT_CLASSES[name]
    if name == "disk":
        from chaos.faults.disk import Disk

        return Disk
    return FAULTS[name]


def build_fault(spec: FaultSpec, index: int) -> Fault:
    """The fault object for schedule entry ``index``."""
    fault: Fault = fault_class(spec.fault)(spec, f"f{index}")
    return fault


__all__ = ["FAULTS", "FAULT_DOCS", "Fault", "FaultEnv", "build_fault", "fault_class"]
