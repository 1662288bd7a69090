"""``chaos run``: a scenario loaded with its command-line overrides, run by the runner, its verdicts
printed (or its result as JSON). The runner's :func:`~chaos.run.runner.run_scenario` checks the
machine first (its preflight, done once); the scenario's header is printed only after that check, on
the run's first event, so a missing capability is exit 2 with nothing printed and nothing started.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from chaos.history import Event


def cmd_run(args: argparse.Namespace) -> int:
    """Exit code: the result's (:meth:`~chaos.verdicts.RunResult.exit_code_for` with ``--strict``); a bad
    scenario or override, or a missing capability, raises :class:`~chaos.errors.ChaosError` (exit 2)."""
    from chaos.load.derive import apply_sets, override_deadline
    from chaos.load.loader import load_scenario
    from chaos.progress import LiveProgress
    from chaos.run.runner import run_scenario
    from chaos.verdicts.table import print_result

    scenario = apply_sets(load_scenario(args.scenario), args.set)  # in scenario.yaml too: the replay keeps them
    if args.deadline_s is not None:  # into the scenario, so that its scenario.yaml (the replay) keeps it
        scenario = override_deadline(scenario, args.deadline_s)
    if args.json:
        result = run_scenario(scenario, args.runs_dir, reference=not args.no_reference)
        write_junit(args, result)
        print(json.dumps({**result.to_json(), "exit_code": result.exit_code_for(args.strict)}, indent=1, default=str))
        return result.exit_code_for(args.strict)
    console = Console(soft_wrap=True)  # paths and commands stay whole lines in a log or a pipe
    announce = OnFirstEvent(console, header_lines(scenario))
    with announce.live(LiveProgress(console, scenario.target.steps, scenario.world_size)) as observer:
        result = run_scenario(scenario, args.runs_dir, reference=not args.no_reference, observer=observer)
    announce.flush()
    write_junit(args, result)
    print_result(console, result, strict=args.strict)
    return result.exit_code_for(args.strict)


def header_lines(scenario: Any) -> list[str]:
    """The lines (rich markup) printed before a run: its name and description, each fault of its schedule,
    and the notes (dropped command options, cwd, interpreter, leftover checkpoints)."""
    from chaos.load.notes import run_notes

    lines = [f"[bold]{escape(scenario.name)}[/]" + (f": {escape(scenario.description)}" if scenario.description else "")]
    lines += [f"  schedule: {escape(entry.describe())}" for entry in scenario.schedule]
    return lines + [f"  note: {escape(note)}" for note in run_notes(scenario)]


class OnFirstEvent:
    """Prints ``lines`` and starts a live display on the run's first event (after the runner's preflight),
    never before; :meth:`flush` prints the lines of a run that had no event."""

    def __init__(self, console: Console, lines: list[str]) -> None:
        self.console = console
        self.lines = list(lines)
        self._live: Any = None
        self._started = False

    def flush(self) -> None:
        """Print the lines not yet printed (each once)."""
        while self.lines:
            self.console.print(self.lines.pop(0))

    def live(self, display: Any) -> OnFirstEvent:
        """Use as ``with announce.live(display) as observer``: ``display`` (a context manager and an
        observer, e.g. :class:`~chaos.progress.LiveProgress`) is entered at the first event and left
        with the block."""
        self._live = display
        return self

    def __enter__(self) -> Callable[[Event], None]:
        return self._observe

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._live.__exit__(*exc)

    def _observe(self, event: Event) -> None:
        if not self._started:
            self.flush()
            self._live.__enter__()
            self._started = True
        self._live(event)


def write_junit(args: argparse.Namespace, result: Any) -> None:
    """Write ``result``'s verdicts as JUnit XML to ``args.junit``, if given (``--strict``: unknown fails)."""
    if args.junit:
        from chaos.verdicts.junit import write_junit as write

        write([result], args.junit, strict=getattr(args, "strict", False))
