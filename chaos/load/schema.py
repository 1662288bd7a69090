"""Every scenario field, generated from the models: the JSON Schema of a scenario file (``chaos
schema``, for editors that complete and check YAML) and a Markdown table of every field with its
type, default and description (``chaos schema --markdown``, committed as ``docs/scenario-fields.md``).

:func:`field_problem` also tells whether a dotted key (``backend.kind``, ``schedule.0.trigger.at_step``)
names a field, for ``chaos run --set``.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from chaos.scenario import Scenario
from chaos.scenario.plugin_faults import add_plugin_schemas

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a scenario file, as YAML holds it: the models' own schema,
    plus the shorthands the loader accepts (``checks: [completes, {recovery_time: {max_s: 60}}]``)."""
    return copy.deepcopy(_schema())


@functools.lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    from chaos.checks import CHECKS

    schema = Scenario.model_json_schema(mode="validation")
    schema = {"$schema": SCHEMA_DIALECT, **schema, "title": "chaos scenario"}
    add_plugin_schemas(schema)  # the faults of installed plugins (chaos.faults entry points), if any
    checks = schema["properties"]["checks"]
    checks["items"] = {"anyOf": [
        {"type": "string", "enum": sorted(CHECKS), "description": "A check by name, with its default parameters."},
        {"type": "object", "minProperties": 1, "maxProperties": 1, "propertyNames": {"enum": sorted(CHECKS)},
         "additionalProperties": {"type": ["object", "null"]}, "description": "{check: {param: value}}"},
        {"$ref": "#/$defs/CheckSpec"},
    ]}
    return schema


def schema_json() -> str:
    """:func:`scenario_schema` as indented JSON text."""
    return json.dumps(scenario_schema(), indent=2) + "\n"


# -- walking the schema --------------------------------------------------------------------------------
def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return defs[ref.rsplit("/", 1)[1]] if isinstance(ref, str) else node


def _alternatives(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """``node`` resolved, with its anyOf / oneOf alternatives flattened."""
    node = _resolve(node, defs)
    alts = node.get("anyOf") or node.get("oneOf")
    if alts:
        return [a for alt in alts for a in _alternatives(alt, defs)]
    return [node]


def _type_of(node: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in node:
        return str(node["$ref"]).rsplit("/", 1)[1]
    alts = node.get("anyOf") or node.get("oneOf")
    if alts:
        return " \\| ".join(dict.fromkeys(_type_of(a, defs) for a in alts))
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        if len(node["enum"]) > 8:
            return "str (a name: see description)"
        return " \\| ".join(json.dumps(v) for v in node["enum"])
    kind = node.get("type")
    if kind == "array":
        return f"list[{_type_of(node.get('items') or {}, defs)}]"
    if kind == "object":
        extra = node.get("additionalProperties")
        return f"dict[str, {_type_of(extra, defs)}]" if isinstance(extra, dict) and extra else "mapping"
    names = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "null"}
    if isinstance(kind, list):
        return " \\| ".join(names.get(str(k), str(k)) for k in kind)
    return names.get(str(kind), "any")


def _bounds(node: dict[str, Any]) -> str:
    marks = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<"}
    found = [f"{sym} {node[k]}" for k, sym in marks.items() if k in node]
    for alt in node.get("anyOf") or []:
        found += [f"{sym} {alt[k]}" for k, sym in marks.items() if k in alt]
    return f" ({', '.join(found)})" if found else ""


@dataclass
class Section:
    """One model's fields and the dotted paths where it appears in a scenario."""

    model: str
    description: str
    paths: list[str] = field(default_factory=list)
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # field, type, default, description


def sections() -> list[Section]:
    """Every model of a scenario, in the order a scenario file reads (root first), each with its
    fields' (name, type, default, description)."""
    schema = scenario_schema()
    defs = schema["$defs"]
    out: dict[str, Section] = {}
    todo: list[tuple[str, dict[str, Any], str]] = [("Scenario", schema, "")]
    while todo:
        name, model, path = todo.pop(0)
        if name in out:
            if path and path not in out[name].paths:
                out[name].paths.append(path)
            continue
        sec = out[name] = Section(name, " ".join(str(model.get("description", "")).split()), [path] if path else [])
        required = set(model.get("required") or [])
        for key, prop in (model.get("properties") or {}).items():
            default = ("required" if key in required else
                       json.dumps(prop["default"]) if "default" in prop else _factory_default(name, key))
            desc = " ".join(str(prop.get("description", "")).split()).replace("|", "\\|")
            sec.rows.append((key, _type_of(prop, defs) + _bounds(prop), default, desc))
            sub = f"{path}.{key}" if path else key
            for alt in _walk_models(prop, defs, sub):
                todo.append(alt)
    return list(out.values())


def _factory_default(model: str, key: str) -> str:
    """The default of a field with a default factory (a list, a mapping, a model), as JSON."""
    from pydantic import BaseModel

    from chaos.scenario import backend, blackbox, checks, faults, net_faults, target, trigger
    from chaos.scenario import model as whole

    classes = {k: v for mod in (whole, target, backend, trigger, faults, net_faults, checks, blackbox)
               for k, v in vars(mod).items() if isinstance(v, type) and issubclass(v, BaseModel)}
    info = classes[model].model_fields.get(key) if model in classes else None
    if info is None or info.default_factory is None:
        return "computed (see description)"
    value = info.default_factory()  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        return f"{type(value).__name__} with its defaults"
    if isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
        value = [v.model_dump(mode="json", exclude_defaults=True) for v in value]
        value = [next(iter(v.values())) if len(v) == 1 else v for v in value]
    return json.dumps(value)


def _walk_models(node: dict[str, Any], defs: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any], str]]:
    """The models reachable from a property at ``path`` (through $ref, unions, list items)."""
    found = []
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[1]
        found.append((name, defs[name], path))
    for alt in node.get("anyOf") or node.get("oneOf") or []:
        found += _walk_models(alt, defs, path)
    if isinstance(node.get("items"), dict):
        found += _walk_models(node["items"], defs, f"{path}[]")
    return found


def markdown() -> str:
    """Every scenario field as Markdown: one table per model (field, type, default, description)."""
    lines = ["# Scenario fields", "",
             "Generated from the models by `chaos schema --markdown > docs/scenario-fields.md`; do not edit by hand "
             "(a unit test fails when it is out of date). `chaos schema` prints the JSON Schema, which editors use to "
             "complete and check scenario files. Any field can be overridden for one run with "
             "`chaos run SCENARIO --set key=value` (dotted keys, YAML values, e.g. `--set backend.kind=docker`, "
             "`--set schedule.0.trigger.at_step=5`).", ""]
    for sec in sections():
        where = ", ".join(f"`{p}`" for p in sec.paths) if sec.paths else "the scenario file's top level"
        lines += [f"## {sec.model}", "", f"At {where}. {sec.description}".rstrip(), "",
                  "| field | type | default | description |", "|---|---|---|---|"]
        lines += [f"| `{name}` | {kind} | {default} | {desc} |" for name, kind, default, desc in sec.rows]
        lines.append("")
    return "\n".join(lines)


# -- dotted keys (chaos run --set) -----------------------------------------------------------------------
def field_problem(keys: list[str]) -> str | None:
    """Why the dotted key ``keys`` (``["schedule", "0", "trigger", "at_step"]``) names no scenario
    field, with the nearest field's name; None if some model has it. List items are given by index;
    a mapping of free keys (``target.env.X``, ``backend.rdzv_conf.X``) takes any key."""
    schema = _schema()
    defs = schema["$defs"]
    nodes: list[dict[str, Any]] = [schema]
    for i, key in enumerate(keys):
        here = ".".join(keys[:i]) or "the scenario"
        nxt: list[dict[str, Any]] = []
        names: list[str] = []
        listy = free = False
        for node in nodes:
            for alt in _alternatives(node, defs):
                given = alt.get("type")
                kinds: list[Any] = given if isinstance(given, list) else [given]
                if "object" in kinds and "properties" not in alt and alt.get("additionalProperties", True) in (True, {}):
                    free = True  # a mapping of anything (a check's params): every key below is the check's
                if alt.get("type") == "array" or "items" in alt:
                    listy = True
                    if key.isdigit():
                        nxt.append(alt.get("items") or {})
                props = alt.get("properties")
                if isinstance(props, dict):
                    names += list(props)
                    if key in props:
                        nxt.append(props[key])
                extra = alt.get("additionalProperties")
                allowed = (alt.get("propertyNames") or {}).get("enum")
                if allowed:
                    names += [str(a) for a in allowed]
                if isinstance(extra, dict) and not props and (not allowed or key in allowed):
                    nxt.append(extra)
        if free and not nxt:
            return None
        if not nxt:
            if listy and not names:
                return f"{here} is a list; give an item's index, e.g. {here}.0"
            near = difflib.get_close_matches(key, names, n=1)
            hint = f"did you mean {'.'.join([*keys[:i], near[0]])}? " if near else ""
            return (f"{'.'.join(keys[:i + 1])} is not a field of {here}; {hint}`chaos schema --markdown` lists every "
                    "field")
        nodes = nxt
    return None


def suggestion(keys: list[str]) -> str | None:
    """The dotted field a misspelt ``keys`` (e.g. ``["target", "checkpoint_evry"]``) most likely means
    (``"target.checkpoint_every"``), or None."""
    problem = field_problem(keys)
    found = re.search(r"did you mean (\S+)\? ", problem or "")
    return found.group(1) if found else None
