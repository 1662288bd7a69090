"""The scenario model (layer 2): what a user writes, validated, with every problem found at once.

``model`` holds the sections (target, backend, schedule, checks) and :class:`Scenario`; ``blackbox``
the black-box spec (``blackbox:`` in a scenario), ``command`` how a ``torchrun ...`` command is taken
apart, ``validate_blackbox`` the cross-field rules of a black-box scenario, ``target_env`` the job's
working directory and interpreter. Everything a caller needs is importable from here.
"""

from chaos.scenario.blackbox import BlackboxSpec
from chaos.scenario.model import (
    ARG_PLACEHOLDERS,
    BLACKBOX_DEFAULT_CHECKS,
    NETWORK_FAULTS,
    BackendSpec,
    BandwidthFault,
    CheckpointFault,
    CheckSpec,
    DelayFault,
    DiskFault,
    DockerBackendSpec,
    FaultSpec,
    GradientFault,
    KillFault,
    LocalBackendSpec,
    LossFault,
    NetnsBackendSpec,
    NodeCrashFault,
    NodeRestartFault,
    NodesSpec,
    ParameterFault,
    PartitionFault,
    PauseFault,
    Scenario,
    Selector,
    Trigger,
    is_elastic,
    python_of,
    work_dir_of,
)

__all__ = [
    "ARG_PLACEHOLDERS",
    "BLACKBOX_DEFAULT_CHECKS",
    "BackendSpec",
    "BandwidthFault",
    "BlackboxSpec",
    "CheckSpec",
    "CheckpointFault",
    "DelayFault",
    "DiskFault",
    "DockerBackendSpec",
    "FaultSpec",
    "GradientFault",
    "KillFault",
    "LocalBackendSpec",
    "LossFault",
    "NETWORK_FAULTS",
    "NetnsBackendSpec",
    "NodeCrashFault",
    "NodeRestartFault",
    "NodesSpec",
    "ParameterFault",
    "PartitionFault",
    "PauseFault",
    "Scenario",
    "Selector",
    "Trigger",
    "is_elastic",
    "python_of",
    "work_dir_of",
]
