"""How ``chaos explore`` gets its runs: the :class:`ExampleRunner` contract and the real one.

The search (:mod:`chaos.explore.engine`) decides *which* schedules to run; an example runner does the
I/O: checks the machine, gives the fault-free reference history the schedules are drawn against, runs
one schedule and draws a run's report. :class:`RealRunner` (the default) does this with real torchrun
jobs; the unit tests give the search stored results of real runs instead, so generation and shrinking
are tested without a job.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from chaos.history import Event, load_journal
from chaos.run.reference import ReferenceCache
from chaos.run.runner import preflight, reference_run, run_scenario
from chaos.scenario import Scenario
from chaos.verdicts.conclude import render_report
from chaos.verdicts.result import RunResult


class ExampleRunner(Protocol):
    """What explore asks of the world. A runner may raise :class:`~chaos.errors.ChaosError` (the
    search stops and re-raises it) and KeyboardInterrupt."""

    def preflight(self, scenario: Scenario) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` if this machine cannot run ``scenario`` (one
        fault of every kind the search may draw); called once, before any run."""
        ...

    def reference_history(self, scenario: Scenario) -> tuple[list[Event] | None, str]:
        """The history of a fault-free run of ``scenario``'s job (None: none could be had) and a note
        for the user saying where it came from (cached, run now, or why not)."""
        ...

    def run(self, scenario: Scenario, runs_dir: Path, *, reference: bool,
            observer: Callable[[Event], None] | None) -> RunResult:
        """Run ``scenario`` (the explored one with a drawn schedule) once and judge it; the run's
        directory goes under ``runs_dir``. ``reference``: compare with a fault-free run (as
        :func:`~chaos.run.runner.run_scenario`); ``observer`` is told every event as it happens. A
        result whose ``status`` is ``interrupted`` stops the search."""
        ...

    def report(self, result: RunResult) -> None:
        """Draw ``result``'s report (explore draws only the minimal failing run's). Never raises."""
        ...


class RealRunner:
    """Real torchrun runs through :func:`~chaos.run.runner.run_scenario`; the reference comes from
    (or goes into) the :class:`~chaos.run.reference.ReferenceCache`."""

    def preflight(self, scenario: Scenario) -> None:
        preflight(scenario)

    def reference_history(self, scenario: Scenario) -> tuple[list[Event] | None, str]:
        ref, note = ReferenceCache().get_or_run(scenario, reference_run)
        if ref is None:
            return None, note
        try:
            return load_journal(Path(ref.run_dir)), note
        except OSError:
            return None, note

    def run(self, scenario: Scenario, runs_dir: Path, *, reference: bool,
            observer: Callable[[Event], None] | None) -> RunResult:
        # no report per run (~0.6 s each): only the minimal failing run's is drawn, at the end
        return run_scenario(scenario, runs_dir, reference=reference, observer=observer, report=False)

    def report(self, result: RunResult) -> None:
        render_report(result)
