"""A scenario derived from another: settings overridden, target arguments appended, schedule replaced.

What the pytest fixture's ``overrides``/``extra_args``/``schedule``, ``chaos run --set`` /
``--deadline-s`` and ``chaos explore --target-args`` do, in one place. A top-level field no other rule
reads (:data:`ONE_FIELD`) is set alone, validated by itself; anything else re-validates the scenario's
data as a file's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError
from chaos.load.loader import load_scenario, scenario_from_dict
from chaos.scenario import NodesSpec, Scenario
from chaos.scenario.base import short

# top-level fields that can be set alone: no rule but the field's own and deadline_problems (chaos.load.rules) reads them
ONE_FIELD = ("name", "description", "deadline_s")


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: dicts merge key by key, other values replace."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def derive_scenario(scenario: str | Path | Scenario | dict[str, Any], overrides: dict[str, Any] | None = None,
                    extra_args: Iterable[str] = (), schedule: Iterable[Any] | None = None) -> Scenario:
    """``scenario`` (a YAML path, a Scenario or scenario data) with ``overrides`` merged into its data,
    ``extra_args`` appended to the target's arguments and, if given, ``schedule`` (fault specs, dicts,
    or a :class:`~chaos.strategies.Schedule`) as its schedule. Switching ``backend.kind`` keeps the
    settings every backend shares (nodes, rendezvous, …). Raises :class:`~chaos.errors.ScenarioError`."""
    extra = list(extra_args)
    if not extra and schedule is None and all(k in ONE_FIELD for k in overrides or {}):
        if isinstance(scenario, str | Path):
            scenario = load_scenario(scenario)
        if isinstance(scenario, Scenario):  # only fields set alone: no whole re-validation
            return _set(scenario, overrides, validate=True) if overrides else scenario
    source: Path | None = None
    if isinstance(scenario, Scenario):
        data, source = scenario.to_data(), scenario.source
    elif isinstance(scenario, str | Path):
        source = Path(scenario)
        data = load_scenario(source).to_data()
    else:
        data = dict(scenario)
    new_kind = ((overrides or {}).get("backend") or {}).get("kind")
    if new_kind and isinstance(data.get("backend"), dict) and data["backend"].get("kind") != new_kind:
        data["backend"] = {k: v for k, v in data["backend"].items() if k in NodesSpec.model_fields}
    data = merge(data, overrides or {})
    if extra:
        data["target"] = {**data["target"], "args": [*data["target"].get("args", []), *extra]}
    if schedule is not None:
        data["schedule"] = [s if isinstance(s, dict) else s.model_dump(mode="json") for s in schedule]
    return scenario_from_dict(data, source=source)


def _set(scenario: Scenario, values: dict[str, Any], validate: bool) -> Scenario:
    """``scenario`` with each of ``values`` (fields of :data:`ONE_FIELD`) set, validated alone (the field,
    and for ``deadline_s`` the rules that read it, :func:`chaos.load.rules.deadline_problems`: the triggers'
    ``at_time_s`` before it, a slurm allocation outliving it), every problem reported at once;
    ``validate=False`` for values already checked to be valid for their fields."""
    from pydantic import ValidationError

    from chaos.errors import ScenarioError
    from chaos.load.loader import describe_errors, sort_problems
    from chaos.load.rules import deadline_problems

    copy = scenario.model_copy(deep=True, update=None if validate else values)
    problems: list[str] = []
    for key, value in values.items() if validate else ():
        try:
            Scenario.__pydantic_validator__.validate_assignment(copy, key, value)
        except ValidationError as exc:
            problems += describe_errors(exc, {key: value})
    if "deadline_s" in values:
        problems += deadline_problems({"schedule": [f.model_dump(mode="json") for f in scenario.schedule],
                                       "backend": scenario.backend.model_dump(mode="json"),
                                       "deadline_s": values["deadline_s"]})
    if problems:
        raise ScenarioError(sort_problems(problems), str(scenario.source) if scenario.source else None)
    return copy


def override_deadline(scenario: Scenario, deadline_s: float, flag: str = "--deadline-s") -> Scenario:
    """``scenario`` with ``deadline_s`` overridden from the command line's ``flag`` (kept in the run's
    ``scenario.yaml``, so a replay keeps it). Raises :class:`~chaos.errors.ScenarioError` naming ``flag``
    for a value that is not a positive number of seconds, or naming a trigger's ``at_time_s`` not before it."""
    import math

    from chaos.errors import ScenarioError

    if not (math.isfinite(deadline_s) and deadline_s > 0):
        raise ScenarioError([f"{flag}={deadline_s:g}: must be a positive number of seconds "
                             f"(e.g. {flag} 120); leave it out to use the scenario's deadline_s"])
    return _set(scenario, {"deadline_s": float(deadline_s)}, validate=False)  # checked here, once


def parse_set(item: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` of ``--set``: the dotted key's parts and the value parsed as YAML (``5`` is a
    number, ``[a, b]`` a list, ``null`` none). Raises :class:`~chaos.errors.ScenarioError` naming the
    item and the fix for a malformed item or a key that names no scenario field."""
    from chaos.errors import ScenarioError
    from chaos.load.parse import parse_yaml
    from chaos.load.schema import field_problem

    key, eq, text = item.partition("=")
    key = key.strip()
    parts = key.split(".")
    if not eq or not key or not all(parts):
        raise ScenarioError([f"--set {short(item)} must be KEY=VALUE with a dotted KEY; use e.g. --set backend.kind=docker "
                             "or --set schedule.0.trigger.at_step=5"])
    problem = f"the key is {len(key):,} characters long, longer than any field's path" if len(key) > 200 \
        else field_problem(parts)
    if problem:
        raise ScenarioError([f"--set {short(item)}: {problem}"])
    try:
        value = parse_yaml(text, what="the value")[0] if text.strip() else None
    except ScenarioError as exc:
        why = "; ".join(exc.problems)
        why = f"is not valid YAML ({why.removeprefix('not valid YAML: ')})" if why.startswith("not valid YAML") \
            else f"is refused ({why})"
        raise ScenarioError([f"--set {short(item)}: the value {why}; fix it or quote "
                             f"it, e.g. --set '{short(key)[1:-1]}=\"...\"'"]) from None
    return parts, value


def _assign(data: Any, parts: list[str], value: Any, item: str) -> None:
    from chaos.errors import ScenarioError

    *path, last = parts
    node = data
    for i, part in enumerate([*path, last]):
        at = ".".join(parts[:i + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ScenarioError([f"--set {short(item)}: {at} is past the end of {'.'.join(parts[:i])} "
                                     f"({len(node)} item(s)); use an index in 0..{len(node) - 1}" if node else
                                     f"--set {short(item)}: {'.'.join(parts[:i])} is empty; add its items in the "
                                     "scenario file"])
            index: Any = int(part)
        elif isinstance(node, dict):
            index = part
        else:
            raise ScenarioError([f"--set {short(item)}: {'.'.join(parts[:i])} is {short(node)}, not a mapping; set it whole, "
                                 f"e.g. --set {'.'.join(parts[:i])}={{...}}"])
        if i == len(parts) - 1:
            node[index] = value
        else:
            if isinstance(node, dict) and not isinstance(node.get(index), dict | list):
                node[index] = {}
            node = node[index]


def _raw_data(scenario: Scenario) -> Any:
    """The scenario's data as its file has it (shorthands, omitted defaults), else :meth:`Scenario.to_data`."""
    from chaos.load.parse import parse_yaml, read_scenario_text

    if scenario.source is not None:
        try:
            data = parse_yaml(read_scenario_text(scenario.source), str(scenario.source))[0]
            if isinstance(data, dict) and scenario_from_dict(data, source=scenario.source) == scenario:
                return data
        except (ValueError, ChaosError):
            pass
    return scenario.to_data()


def apply_sets(scenario: Scenario, items: Iterable[str]) -> Scenario:
    """``scenario`` with each ``--set KEY=VALUE`` of ``items`` applied in order (see :func:`parse_set`)
    and validated as a scenario file is. Setting ``backend.kind`` to another backend keeps the settings
    every backend shares. The result's :meth:`~chaos.scenario.Scenario.to_data` (the run's
    ``scenario.yaml``) holds the new values, so a replay reproduces them. Raises
    :class:`~chaos.errors.ScenarioError` naming the ``--set`` and the fix."""
    from chaos.errors import ScenarioError

    items = list(items)
    if not items:
        return scenario
    data = _raw_data(scenario)
    for item in items:
        parts, value = parse_set(item)
        if parts == ["backend", "kind"] and isinstance(data.get("backend"), dict) and data["backend"].get("kind") != value:
            data["backend"] = {k: v for k, v in data["backend"].items() if k in NodesSpec.model_fields}
        _assign(data, parts, value, item)
    try:
        return scenario_from_dict(data, source=scenario.source)
    except ScenarioError as exc:
        sets = " ".join(f"--set {i}" for i in items)
        raise ScenarioError([f"with {sets}: {p}" for p in exc.problems], exc.source) from None
