"""Faults from plugins in ``schedule:``: an entry of a ``fault:`` name that is not built in is validated
by the spec class of the installed ``chaos.faults`` plugin of that name (see :mod:`chaos.plugins`).

:data:`ScheduleItem` is one schedule entry: the built-in union :data:`~chaos.scenario.faults.FaultSpec`
(its errors, an unknown ``fault:`` name's included, are unchanged), or a plugin's spec. A plugin that
fails to load is a validation error of type ``fault_plugin`` naming the plugin and its entry point.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any

from pydantic import (
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    WrapSerializer,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from chaos.plugins import PluginError, fault_plugin, loaded_fault_spec
from chaos.scenario.base import _Model
from chaos.scenario.faults import FaultSpec

# The base of every fault spec, built-in or a plugin's: unknown fields are errors.
FaultModel = _Model


def builtin_fault_names() -> tuple[str, ...]:
    """The ``fault:`` names of the built-in specs (the tags of :data:`FaultSpec`), in its order."""
    union = typing.get_args(FaultSpec)[0]
    return tuple(typing.get_args(spec.model_fields["fault"].annotation)[0] for spec in typing.get_args(union))


BUILTIN_FAULTS = frozenset(builtin_fault_names())


def _validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    name = value.get("fault") if isinstance(value, dict) else None
    if isinstance(name, str) and name not in BUILTIN_FAULTS:
        try:
            plugin = fault_plugin(name, spec_base=_Model)
        except PluginError as exc:
            raise PydanticCustomError("fault_plugin", "{message}", {"message": str(exc), "fault": name}) from exc
        if plugin is not None:
            return plugin.spec.model_validate(value)
    elif loaded_fault_spec(value):  # a plugin's spec object, already valid
        return value
    return handler(value)


def _serialize(value: Any, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
    if loaded_fault_spec(value):
        return value.model_dump(mode=info.mode, exclude_defaults=info.exclude_defaults, exclude_none=info.exclude_none)
    return handler(value)


ScheduleItem = Annotated[FaultSpec, WrapValidator(_validate), WrapSerializer(_serialize)]


def add_plugin_schemas(schema: dict[str, Any]) -> list[str]:
    """Add the spec of every installed fault plugin that loads to ``schema``, the JSON Schema of a scenario
    (``Scenario.model_json_schema()``, changed in place): its model under ``$defs`` and one more
    alternative of ``schedule``'s items, so ``chaos schema`` and ``--set schedule.N.FIELD`` know its fields.
    Returns the names added; a plugin that fails to load is left out (validation names it)."""
    from chaos.plugins import fault_names

    defs: dict[str, Any] = schema.setdefault("$defs", {})
    items = schema["properties"]["schedule"]["items"]
    added = []
    for name in fault_names():
        try:
            plugin = fault_plugin(name, spec_base=_Model)
        except PluginError:
            continue
        if plugin is None:
            continue
        sub = plugin.spec.model_json_schema(mode="validation", ref_template="#/$defs/{model}")
        for key, value in sub.pop("$defs", {}).items():
            defs.setdefault(key, value)
        key = plugin.spec.__name__ if plugin.spec.__name__ not in defs else f"{plugin.spec.__name__}-{name}"
        defs[key] = sub
        items.setdefault("oneOf", []).append({"$ref": f"#/$defs/{key}"})
        items.setdefault("discriminator", {"propertyName": "fault", "mapping": {}})["mapping"][name] = f"#/$defs/{key}"
        added.append(name)
    return added


__all__ = ["BUILTIN_FAULTS", "FaultModel", "ScheduleItem", "add_plugin_schemas", "builtin_fault_names"]
