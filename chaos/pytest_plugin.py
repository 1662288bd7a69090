"""pytest plugin: the ``chaos_run`` fixture, the ``chaos`` marker and the ``--chaos-*`` options.

Loaded automatically when chaos is installed (``pytest11`` entry point). Settings take effect in
this order: command line > environment > ini file > default.

========================  ==================  ===================  ===========================
command line              environment         ini                  default
========================  ==================  ===================  ===========================
``--chaos-runs-dir``      ``CHAOS_RUNS_DIR``  ``chaos_runs_dir``   ``<pytest basetemp>/chaos``
``--chaos-no-reference``                      ``chaos_reference``  reference runs on
``--chaos-backend``                                                each scenario's own
========================  ==================  ===================  ===========================

``@pytest.mark.chaos(requires=["root", "docker"])`` skips a test whose capabilities the machine
lacks, with the reason; under ``CI=true`` the test fails instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos.capabilities import missing
from chaos.loader import load_scenario, scenario_from_dict
from chaos.runner import RunResult, run_scenario
from chaos.scenario import Scenario

RESULTS_KEY = pytest.StashKey[list[RunResult]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "chaos fault injection")
    group.addoption("--chaos-runs-dir", default=None, help="where chaos run directories are kept")
    group.addoption("--chaos-backend", default=None, choices=["local"],
                    help="run every scenario on this backend instead of its own")
    group.addoption("--chaos-no-reference", action="store_true", default=None,
                    help="skip fault-free reference runs (equivalent_to_reference becomes unknown)")
    parser.addini("chaos_runs_dir", "where chaos run directories are kept", default="")
    parser.addini("chaos_reference", "run fault-free reference runs (true/false)", default="true")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "chaos(requires=[...]): a test that runs chaos scenarios; `requires` names capabilities "
        "(torch, sklearn, root, docker, gpu) — missing ones skip the test, or fail it under CI=true",
    )


def _runs_dir(config: pytest.Config) -> Path:
    opt = config.getoption("--chaos-runs-dir")
    if opt:
        return Path(opt)
    if os.environ.get("CHAOS_RUNS_DIR"):
        return Path(os.environ["CHAOS_RUNS_DIR"])
    ini = config.getini("chaos_runs_dir")
    if ini:
        return Path(str(ini))
    factory = config._tmp_path_factory  # type: ignore[attr-defined]
    return Path(factory.getbasetemp()) / "chaos"


def _reference(config: pytest.Config) -> bool:
    if config.getoption("--chaos-no-reference"):
        return False
    return str(config.getini("chaos_reference")).lower() not in ("false", "0", "no")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("chaos"):
        lacking = missing(list(mark.kwargs.get("requires", [])))
        if lacking:
            reason = "; ".join(f"{k}: {v}" for k, v in lacking.items())
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI=true and this machine lacks what the test needs — {reason}", pytrace=False)
            pytest.skip(f"lacks {reason}")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


ChaosRun = Callable[..., RunResult]


@pytest.fixture
def chaos_run(request: pytest.FixtureRequest) -> ChaosRun:
    """Run a scenario and return its :class:`~chaos.runner.RunResult`.

    ``chaos_run(scenario, overrides=None, extra_args=(), deadline_s=None)`` where ``scenario`` is a
    path to a YAML file (a relative path is looked up in the working directory, then in pytest's
    rootdir), a :class:`~chaos.scenario.Scenario`, or a dict of scenario data.
    ``overrides`` is merged into the scenario's data (dicts merge, other values replace);
    ``extra_args`` are appended to the target's arguments (e.g. ``["--broken", "non-atomic-save"]``).
    Raises :class:`~chaos.errors.ScenarioError` for an invalid scenario. Assert with
    ``result.assert_ok()``, whose message lists each failed check and the journal's path.
    """
    config = request.config
    results: list[RunResult] = []
    request.node.stash[RESULTS_KEY] = results

    def run(scenario: str | Path | Scenario | dict[str, Any], overrides: dict[str, Any] | None = None,
            extra_args: list[str] | tuple[str, ...] = (), deadline_s: float | None = None) -> RunResult:
        backend = config.getoption("--chaos-backend")
        if backend:
            overrides = {**(overrides or {}), "backend": {**(overrides or {}).get("backend", {}), "kind": backend}}
        if isinstance(scenario, str | Path) and not Path(scenario).is_absolute() and not Path(scenario).exists():
            # a relative path: from the working directory, else from pytest's rootdir
            candidate = Path(config.rootpath) / scenario
            scenario = candidate if candidate.exists() else scenario
        s = _resolve(scenario, overrides, list(extra_args))
        result = run_scenario(s, _runs_dir(config), reference=_reference(config), deadline_s=deadline_s)
        results.append(result)
        if result.status == "interrupted":
            raise KeyboardInterrupt
        return result

    return run


def _resolve(scenario: str | Path | Scenario | dict[str, Any], overrides: dict[str, Any] | None,
             extra_args: list[str]) -> Scenario:
    if not overrides and not extra_args:
        if isinstance(scenario, Scenario):
            return scenario
        if isinstance(scenario, str | Path):
            return load_scenario(scenario)
    source: Path | None = None
    if isinstance(scenario, Scenario):
        data, source = scenario.model_dump(mode="json"), scenario.source
        if data["target"].get("script"):  # (a target given as a command keeps its own, resolved at load)
            data["target"]["script"] = str(scenario.script_path)
    elif isinstance(scenario, str | Path):
        source = Path(scenario)
        data = load_scenario(source).model_dump(mode="json")
    else:
        data = dict(scenario)
    new_kind = ((overrides or {}).get("backend") or {}).get("kind")
    if new_kind and isinstance(data.get("backend"), dict) and data["backend"].get("kind") != new_kind:
        # another backend: keep the shared settings (nodes, rendezvous, ...), drop the old kind's own
        from chaos.scenario import _NodesSpec

        data["backend"] = {k: v for k, v in data["backend"].items() if k in _NodesSpec.model_fields}
    data = _merge(data, overrides or {})
    if extra_args:
        data["target"] = {**data["target"], "args": [*data["target"].get("args", []), *extra_args]}
    return scenario_from_dict(data, source=source)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    results = item.stash.get(RESULTS_KEY, None)
    if results and report.when == "call" and report.failed:
        lines = []
        for r in results:
            lines.append(f"{r.run_id}: {'ok' if r.ok else 'NOT OK'} ({r.status})")
            lines.append(f"  run directory: {r.run_dir}")
            lines.append(f"  journal:       {r.journal_path}")
            lines.append(f"  replay:        {r.replay_command()}")
        report.sections.append(("chaos runs", "\n".join(lines)))
    return report
