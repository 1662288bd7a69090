"""A scenario derived from another: settings overridden, target arguments appended, schedule replaced.

What the pytest fixture's ``overrides``/``extra_args``/``schedule`` and ``chaos explore
--target-args`` do, in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaos.loader import load_scenario, scenario_from_dict
from chaos.scenario import Scenario, _NodesSpec


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
    if not overrides and not extra and schedule is None:
        if isinstance(scenario, Scenario):
            return scenario
        if isinstance(scenario, str | Path):
            return load_scenario(scenario)
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
        data["backend"] = {k: v for k, v in data["backend"].items() if k in _NodesSpec.model_fields}
    data = merge(data, overrides or {})
    if extra:
        data["target"] = {**data["target"], "args": [*data["target"].get("args", []), *extra]}
    if schedule is not None:
        data["schedule"] = [s if isinstance(s, dict) else s.model_dump(mode="json") for s in schedule]
    return scenario_from_dict(data, source=source)
