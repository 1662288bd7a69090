"""chaos: fault injection for distributed PyTorch training jobs.

The public API is flat: ``from chaos import load_scenario, run_scenario, Scenario, RunResult``.
Attributes load lazily, so ``from chaos import probe`` inside a training worker imports only the
standard library and torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ChaosError": "chaos.errors",
    "ScenarioError": "chaos.errors",
    "CapabilityError": "chaos.errors",
    "Scenario": "chaos.scenario",
    "load_scenario": "chaos.load.loader",
    "scenario_from_dict": "chaos.load.loader",
    "run_scenario": "chaos.run.runner",
    "RunResult": "chaos.verdicts.result",
    "Verdict": "chaos.checks.base",
    "CHECKS": "chaos.checks",
    "History": "chaos.history",
    "load_journal": "chaos.history",
    "rejudge": "chaos.run.rejudge",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:
    from chaos.checks import CHECKS
    from chaos.checks.base import Verdict
    from chaos.errors import CapabilityError, ChaosError, ScenarioError
    from chaos.history import History, load_journal
    from chaos.load.loader import load_scenario, scenario_from_dict
    from chaos.run.rejudge import rejudge
    from chaos.run.runner import run_scenario
    from chaos.scenario import Scenario
    from chaos.verdicts.result import RunResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chaos' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
