"""Fault implementations. A scenario's ``fault:`` name is a row of the kinds table (:mod:`chaos.kinds`), which
names its implementation (``impl``, imported when first asked for: :func:`fault_class`), or a third-party
fault (entry point group ``chaos.faults``). A new built-in fault kind is a spec (:mod:`chaos.scenario.faults`),
an implementation here and a kinds row. In a run of torchft replica groups a kind may have another
implementation (the row's ``group_impl``: a ``delay`` there acts on one group's cgroup), chosen here, once."""

from __future__ import annotations

import importlib

from chaos import kinds
from chaos.faults.base import Fault, FaultEnv, SpecFault
from chaos.scenario import FaultSpec

FAULT_DOCS = kinds.FAULT_DOCS  # one line per kind, from the kinds table


def fault_class(name: str, replica_groups: bool = False) -> type:
    """The class for a ``fault:`` name: the kinds row's ``impl`` (its ``group_impl``, where it has one, in a
    run of torchft replica groups: ``replica_groups``), else a loaded plugin's class. Raises
    :class:`~chaos.plugins.PluginError` for a plugin fault whose class is not a :class:`SpecFault`, KeyError
    for a name that is neither."""
    row = kinds.BY_NAME.get(name)
    if row is not None and row.impl:
        module, _, cls = (row.group_impl if replica_groups and row.group_impl else row.impl).partition(":")
        found: type = getattr(importlib.import_module(module), cls)
        return found
    from chaos.plugins import FAULT_GROUP, PluginError, fault_plugin

    plugin = fault_plugin(name)  # a third-party fault (entry point group chaos.faults); loaded when validated
    if plugin is None:
        raise KeyError(name)
    if not issubclass(plugin.fault, SpecFault):
        raise PluginError(FAULT_GROUP, name, f"fault plugin {name!r}: its fault class {plugin.fault.__qualname__} "
                          "must subclass chaos.faults.base.SpecFault (the contract the nemesis reads: traits, inject, "
                          "heal, prepare/teardown)")
    return plugin.fault


def build_fault(spec: FaultSpec, index: int, replica_groups: bool = False) -> Fault:
    """The fault object for schedule entry ``index`` of a scenario whose backend runs torchft replica groups
    (``backend.replica_groups``) or not (see :func:`fault_class`)."""
    fault: Fault = fault_class(spec.fault, replica_groups)(spec, f"f{index}")
    return fault


__all__ = ["FAULT_DOCS", "Fault", "FaultEnv", "build_fault", "fault_class"]
