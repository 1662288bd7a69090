"""pytest plugin: the ``chaos_run`` fixture, the ``chaos`` marker and the ``--chaos-*`` options.

Loaded automatically when chaos is installed (``pytest11`` entry point). Settings take effect in
this order: command line > environment > ini file > default.

=========================  =====================  ======================  ===========================
command line               environment            ini                     default
=========================  =====================  ======================  ===========================
``--chaos-runs-dir``       ``CHAOS_RUNS_DIR``     ``chaos_runs_dir``      ``<pytest basetemp>/chaos``
``--chaos-no-reference``                          ``chaos_reference``     reference runs on
``--chaos-backend``                                                       each scenario's own
``--chaos-derandomize``    ``CHAOS_DERANDOMIZE``  ``chaos_derandomize``   ``never`` (or ``ci``, ``always``)
=========================  =====================  ======================  ===========================

``--chaos-derandomize`` decides whether :func:`chaos.strategies.chaos_settings` fixes the examples
of ``@given(schedule=schedules(...))`` tests (``ci``: only under ``CI=true``). A failing test's
report names the Hypothesis seed to rerun it with and each chaos run's replay command.

``@pytest.mark.chaos(requires=["root", "docker"])`` skips a test whose capabilities the machine
lacks, with the reason; under ``CI=true`` the test fails instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from chaos.capabilities import missing
from chaos.load.derive import derive_scenario
from chaos.run.runner import run_scenario
from chaos.scenario import Scenario
from chaos.verdicts.result import RunResult

RESULTS_KEY = pytest.StashKey[list[RunResult]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "chaos fault injection")
    group.addoption("--chaos-runs-dir", default=None, help="where chaos run directories are kept")
    group.addoption("--chaos-backend", default=None, choices=["local"],
                    help="run every scenario on this backend instead of its own")
    group.addoption("--chaos-no-reference", action="store_true", default=None,
                    help="skip fault-free reference runs (equivalent_to_reference becomes unknown)")
    group.addoption("--chaos-derandomize", default=None, choices=["never", "ci", "always"],
                    help="fixed examples for @given(schedule=schedules(...)) tests with chaos_settings(): never "
                    "(default), ci (when CI=true) or always")
    parser.addini("chaos_runs_dir", "where chaos run directories are kept", default="")
    parser.addini("chaos_derandomize", "never, ci or always: when chaos_settings() derandomizes", default="")
    parser.addini("chaos_reference", "run fault-free reference runs (true/false)", default="true")


def pytest_configure(config: pytest.Config) -> None:
    policy = config.getoption("--chaos-derandomize") or str(config.getini("chaos_derandomize") or "")
    if policy:
        from chaos.strategies import settings as chaos_strategy_settings

        if policy not in ("never", "ci", "always"):
            raise pytest.UsageError(f"chaos_derandomize = {policy!r}: use never, ci or always")
        chaos_strategy_settings.DERANDOMIZE_POLICY = policy
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


ChaosRun = Callable[..., RunResult]


@pytest.fixture
def chaos_run(request: pytest.FixtureRequest) -> ChaosRun:
    """Run a scenario and return its :class:`~chaos.verdicts.result.RunResult`.

    ``chaos_run(scenario, overrides=None, extra_args=(), deadline_s=None)`` where ``scenario`` is a
    path to a YAML file (a relative path is looked up in the working directory, then in pytest's
    rootdir), a :class:`~chaos.scenario.Scenario`, or a dict of scenario data.
    ``overrides`` is merged into the scenario's data (dicts merge, other values replace);
    ``extra_args`` are appended to the target's arguments (e.g. ``["--broken", "non-atomic-save"]``);
    ``schedule`` replaces the scenario's schedule (a :class:`~chaos.strategies.Schedule` drawn by
    ``@given(schedule=schedules(...))``, or a list of fault specs or dicts).
    Raises :class:`~chaos.errors.ScenarioError` for an invalid scenario. Assert with
    ``result.assert_ok()``, whose message lists each failed check and the journal's path: every check
    must be ``ok`` (an ``unknown`` fails the test, the rule of ``chaos run --strict``);
    ``assert_ok(allow_unknown=True)`` fails only on a ``failed`` check (the rule of a plain ``chaos run``).
    """
    config = request.config
    results: list[RunResult] = []
    request.node.stash[RESULTS_KEY] = results

    def run(scenario: str | Path | Scenario | dict[str, Any], overrides: dict[str, Any] | None = None,
            extra_args: list[str] | tuple[str, ...] = (), deadline_s: float | None = None,
            schedule: Iterable[Any] | None = None) -> RunResult:
        backend = config.getoption("--chaos-backend")
        if backend:
            overrides = {**(overrides or {}), "backend": {**(overrides or {}).get("backend", {}), "kind": backend}}
        if isinstance(scenario, str | Path) and not Path(scenario).is_absolute() and not Path(scenario).exists():
            # a relative path: from the working directory, else from pytest's rootdir
            candidate = Path(config.rootpath) / scenario
            scenario = candidate if candidate.exists() else scenario
        s = derive_scenario(scenario, overrides, extra_args, schedule)
        result = run_scenario(s, _runs_dir(config), reference=_reference(config), deadline_s=deadline_s)
        results.append(result)
        if result.status == "interrupted":
            raise KeyboardInterrupt
        return result

    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    results = item.stash.get(RESULTS_KEY, None)
    if results and report.when == "call" and report.failed:
        lines = []
        seed = getattr(getattr(item, "obj", None), "_hypothesis_internal_use_generated_seed", None)
        if seed is not None:
            lines.append(f"hypothesis seed {seed}: rerun with pytest --hypothesis-seed={seed} "
                         "(the last run below is the falsifying example's)")
        for r in results:
            lines.append(f"{r.run_id}: {'ok' if r.ok else 'NOT OK'} ({r.status})")
            lines.append(f"  run directory: {r.run_dir}")
            lines.append(f"  journal:       {r.journal_path}")
            lines += _report_lines(r)
            lines.append(f"  replay:        {r.replay_command()}")
        report.sections.append(("chaos runs", "\n".join(lines)))
    return report


def _report_lines(result: RunResult) -> list[str]:
    """Where the run's report and timeline are (or that they could not be rendered)."""
    if not result.report_path.exists():
        return [f"  report:        not rendered (see {result.run_dir / 'runner.jsonl'})"]
    out = [f"  report:        {result.report_path}"]
    if result.timeline_path.exists():
        out.append(f"  timeline:      {result.timeline_path}")
    return out
