"""The scenario model (layer 2): what a user writes, validated, with every problem found at once.

One module per section of a scenario file: ``target`` (the job), ``backend`` (where the nodes live),
``trigger`` (when a fault fires, what it hits), ``faults`` and ``net_faults`` (``schedule``), ``checks``,
and ``model`` (:class:`Scenario`, the whole file). ``blackbox`` holds the black-box spec (``blackbox:`` in a
target), ``command`` how a ``torchrun ...`` command is taken apart, ``validate_blackbox`` the cross-field
rules of a black-box scenario, ``target_env`` the job's working directory and interpreter. Everything a
caller needs is importable from here.
"""

from chaos.scenario.backend import (
    BackendSpec,
    DockerBackendSpec,
    LocalBackendSpec,
    NetnsBackendSpec,
    NodesSpec,
    SlurmBackendSpec,
    SlurmSshSpec,
    SshBackendSpec,
    SshHostSpec,
    is_elastic,
)
from chaos.scenario.blackbox import BlackboxSpec
from chaos.scenario.checks import BLACKBOX_DEFAULT_CHECKS, CheckSpec
from chaos.scenario.faults import (
    CheckpointFault,
    DiskFault,
    FaultSpec,
    GradientFault,
    KillFault,
    NodeCrashFault,
    NodeRestartFault,
    ParameterFault,
    PauseFault,
    SlurmdKillFault,
    SlurmDownFault,
    SlurmDrainFault,
    SlurmRequeueFault,
    SlurmSignalFault,
)
from chaos.scenario.model import Scenario
from chaos.scenario.net_faults import BandwidthFault, DelayFault, LossFault, PartitionFault
from chaos.scenario.plugin_faults import FaultModel
from chaos.scenario.target import ARG_PLACEHOLDERS, python_of, work_dir_of
from chaos.scenario.torchft import LighthousePartitionFault, LighthouseSpec, ReplicaGroupsSpec
from chaos.scenario.trigger import Selector, Trigger

__all__ = [
    "ARG_PLACEHOLDERS",
    "BLACKBOX_DEFAULT_CHECKS",
    "BackendSpec",
    "BandwidthFault",
    "BlackboxSpec",
    "CheckSpec",
    "CheckpointFault",
    "SlurmDownFault",
    "SlurmDrainFault",
    "SlurmdKillFault",
    "SlurmRequeueFault",
    "SlurmSignalFault",
    "DelayFault",
    "DiskFault",
    "DockerBackendSpec",
    "SlurmBackendSpec",
    "SlurmSshSpec",
    "SshBackendSpec",
    "SshHostSpec",
    "FaultModel",
    "FaultSpec",
    "GradientFault",
    "KillFault",
    "LocalBackendSpec",
    "LossFault",
    "NetnsBackendSpec",
    "NodeCrashFault",
    "NodeRestartFault",
    "NodesSpec",
    "ParameterFault",
    "PartitionFault",
    "LighthousePartitionFault",
    "LighthouseSpec",
    "ReplicaGroupsSpec",
    "PauseFault",
    "Scenario",
    "Selector",
    "Trigger",
    "is_elastic",
    "python_of",
    "work_dir_of",
]
